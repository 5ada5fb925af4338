// Verifier for the controller tests: reward 1 when the harness printed "answer: <the task's
// reference answer>", else 0 (the reference answer is an extra field of the task line).
import { readFileSync } from "node:fs"

const task = JSON.parse(readFileSync(process.env.REINS_TASK_FILE, "utf8"))
const out = readFileSync(process.env.REINS_STDOUT_FILE, "utf8")
console.log(JSON.stringify({ reward: out.includes(`answer: ${task.reference}`) ? 1 : 0, outcome: process.env.REINS_OUTCOME }))
