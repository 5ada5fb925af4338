#!/usr/bin/env node
/**
 * The mini-swe verifier: applies the harness's patch to a fresh copy of the task's package and
 * runs the package's own tests plus the hidden ones with `node --test`. Prints `1` (all pass) or
 * `0` (`−P` with a wander penalty, below) as its last stdout line; why, on stderr.
 *
 *   REINS_TASK or REINS_TASK_FILE (or --task FILE)     the whole task line (with hidden_tests)
 *   REINS_STDOUT_FILE (or --stdout FILE)               the harness's stdout (its `RESULT:` line)
 *   MINISWE_TEST_TIMEOUT_MS (30000)
 *   --wander-penalty P (or MINISWE_WANDER_PENALTY; 0, off)
 *       a failed rollout that did not end with an answer (it hit max turns or the context limit,
 *       or printed no RESULT line) scores −P instead of 0, so that among failures RL prefers the
 *       ones that stop; a fix scores 1 however the episode ended, so pass@1 is unchanged
 *
 * Only source files of the original package are taken from the patch: edits to test files or
 * new files are ignored, so a policy cannot earn a reward by rewriting the tests.
 * Exits 2 when its own inputs are missing or malformed (a setup error, not a zero reward).
 */
import { readFileSync } from "node:fs"
import { RESULT_PREFIX, isTestPath, openWorkspace, packageFiles, runNodeTests } from "./agent.mjs"
import { renderTestFile } from "./tasks.mjs"

const HIDDEN_TEST = "__hidden.test.mjs"

const fail = (message) => {
  process.stderr.write(`mini-swe verify: ${message}\n`)
  process.exit(2)
}

const option = (name) => {
  const k = process.argv.indexOf(name)
  return k >= 0 ? process.argv[k + 1] : undefined
}

const readTask = () => {
  const file = option("--task") ?? (process.env.REINS_TASK ? undefined : process.env.REINS_TASK_FILE)
  const raw = file !== undefined ? readFileSync(file, "utf8") : process.env.REINS_TASK
  if (raw === undefined) fail("no task: set REINS_TASK or REINS_TASK_FILE, or pass --task FILE")
  const task = JSON.parse(raw)
  const hidden = task?.hidden_tests
  if (typeof hidden?.fn !== "string" || typeof hidden?.source !== "string" || !Array.isArray(hidden?.cases)) {
    fail(`task ${task?.id ?? "?"} has no hidden_tests {fn, source, cases}`)
  }
  return { task, files: packageFiles(task.input), hidden }
}

/** The penalty for a failed rollout that did not end with an answer: a number in [0, 1]. */
const wanderPenalty = () => {
  const raw = option("--wander-penalty") ?? process.env.MINISWE_WANDER_PENALTY ?? "0"
  const p = Number(raw)
  if (raw.trim() === "" || !Number.isFinite(p) || p < 0 || p > 1) fail(`--wander-penalty (MINISWE_WANDER_PENALTY) must be a number from 0 to 1, got ${JSON.stringify(raw)}`)
  return p
}

/** The files and finish of the harness's last `RESULT:` line, or why there are none. */
const patchFromStdout = (stdout) => {
  const line = stdout.split(/\r?\n/).filter((l) => l.startsWith(RESULT_PREFIX)).at(-1)
  if (line === undefined) return { reason: "the harness printed no RESULT line" }
  try {
    const { files, finish } = JSON.parse(line.slice(RESULT_PREFIX.length))
    if (typeof files !== "object" || files === null || Array.isArray(files)) return { reason: "RESULT has no files object" }
    return { files, finish }
  } catch {
    return { reason: "RESULT line is not valid JSON" }
  }
}

const main = async () => {
  const penalty = wanderPenalty()
  const { task, files, hidden } = readTask()
  const stdoutFile = option("--stdout") ?? process.env.REINS_STDOUT_FILE
  if (stdoutFile === undefined) fail("no harness output: set REINS_STDOUT_FILE or pass --stdout FILE")
  let stdout = ""
  try {
    stdout = readFileSync(stdoutFile, "utf8")
  } catch (e) {
    process.stderr.write(`cannot read ${stdoutFile}: ${e.message}\n`)
  }
  const patch = patchFromStdout(stdout)
  // 0 for a failure that ended with an answer; less (with a penalty) for one that wandered.
  const failed = patch.finish === "answer" || penalty === 0 ? 0 : -penalty
  if (patch.files === undefined) {
    process.stderr.write(`task ${task.id}: ${patch.reason}\n`)
    return failed
  }
  const ws = openWorkspace(files, "mini-swe-verify-")
  try {
    for (const [path, content] of Object.entries(patch.files)) {
      if (typeof content === "string" && files[path] !== undefined && !isTestPath(path)) ws.write(path, content)
    }
    ws.write(HIDDEN_TEST, renderTestFile(hidden.fn, hidden.source, hidden.cases))
    const timeoutMs = Number(process.env.MINISWE_TEST_TIMEOUT_MS) || 30_000
    const run = await runNodeTests(ws.dir, ws.paths().filter(isTestPath), { timeoutMs })
    process.stderr.write(`task ${task.id}: ${run.summary}\n`)
    return run.exitCode === 0 && run.failed === 0 && run.passed >= hidden.cases.length ? 1 : failed
  } finally {
    ws.close()
  }
}

main().then(
  (reward) => process.stdout.write(`${reward}\n`),
  (e) => fail(e?.stack ?? String(e))
)
