#!/usr/bin/env node
/**
 * The calc verifier: prints `1` when the harness's last `ANSWER:` line equals the task's
 * reference answer, else `0`. Run by reins after the harness exits, with the whole task line
 * (reference answer included) in REINS_TASK_FILE / REINS_TASK and the harness's output in
 * REINS_STDOUT_FILE. A harness that printed no answer (crashed, timed out) simply scores 0;
 * a task without a numeric `answer` is a configuration error (exit 2, reported by reins).
 * Its pieces are exported for programs that score the same way (the benchmark's shaped reward).
 */
import { readFileSync, realpathSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { ANSWER_PREFIX } from "./agent.mjs"

/** A task line reins cannot score: a configuration error, not a wrong answer. */
export class TaskError extends Error {}

/** The task's reference answer, from its JSON line. */
export const referenceOf = (taskText) => {
  let task
  try {
    task = JSON.parse(taskText)
  } catch {
    throw new TaskError(`the task is not JSON: ${taskText.slice(0, 200)}`)
  }
  const expected = task?.answer
  if (typeof expected !== "number" || !Number.isFinite(expected)) throw new TaskError(`task ${task?.id ?? "?"} has no numeric "answer"`)
  return expected
}

/** The harness's answer: what follows its last `ANSWER:` line, or `null` when it printed none. */
export const answerIn = (stdout) => {
  const line = stdout.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.startsWith(ANSWER_PREFIX)).at(-1)
  return line === undefined ? null : line.slice(ANSWER_PREFIX.length).trim()
}

/** Numbers compare as numbers ("85.0" is 85), with room for the tool's 6-decimal rounding. */
export const isCorrect = (given, expected) => given !== null && /^-?\d+(\.\d+)?$/.test(given) && Math.abs(Number(given) - expected) < 1e-6

const fail = (message) => {
  process.stderr.write(`calc verifier: ${message}\n`)
  process.exit(2)
}

const readOr = (path, fallback) => {
  if (!path) return fallback
  try {
    return readFileSync(path, "utf8")
  } catch (e) {
    return fallback ?? fail(`cannot read ${path}: ${e.message}`)
  }
}

/** The verifier's inputs from reins's environment: the task line and the harness's output. */
export const verifierInputs = () => {
  const taskText = readOr(process.env.REINS_TASK_FILE, process.env.REINS_TASK)
  if (taskText === undefined) fail("no task: REINS_TASK_FILE or REINS_TASK must hold the task line")
  if (!process.env.REINS_STDOUT_FILE) fail("REINS_STDOUT_FILE is not set")
  // A missing output file means the harness wrote nothing: no answer, reward 0.
  const stdout = readOr(process.env.REINS_STDOUT_FILE, "")
  try {
    return { expected: referenceOf(taskText), given: answerIn(stdout) }
  } catch (e) {
    if (e instanceof TaskError) fail(e.message)
    throw e
  }
}

const runAsProgram = () => {
  try {
    return realpathSync(process.argv[1] ?? "") === fileURLToPath(import.meta.url)
  } catch {
    return false
  }
}

// Run as a program, not imported (as the benchmark's shaped verifier does): print the verdict.
if (runAsProgram()) {
  const { expected, given } = verifierInputs()
  process.stdout.write(isCorrect(given, expected) ? "1\n" : "0\n")
}
