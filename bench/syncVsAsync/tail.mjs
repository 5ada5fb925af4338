#!/usr/bin/env node
/**
 * The `--tail X` knob of bench/sync-vs-async.ts, as a harness wrapper: runs the real harness
 * unchanged (`node tail.mjs CMD [ARGS...]`, same stdio, same exit code) and, for a deterministic
 * share of the tasks — the "slow" ones, like tasks whose test suite is slow — waits after it
 * exited for (X − 1) × a unit, so those rollouts last about X times as long. The unit is a fixed
 * time (the benchmark passes the harness's measured uncontended duration) or, without one, the
 * time this harness took. A fixed unit is what makes modes comparable: on a machine where the
 * harnesses share the cores, a mode that runs more of them at once makes each one slower, and a
 * wait proportional to that would give it a longer tail for the same task. X = 1 adds nothing:
 * the natural spread. Every mode of the benchmark sees the same tasks slow.
 *
 *   REINS_BENCH_TAIL            X >= 1 (default 1)
 *   REINS_BENCH_TAIL_FRACTION   share of tasks that are slow, 0..1 (default 0.25)
 *   REINS_BENCH_TAIL_UNIT_S     the unit in seconds (default: the harness's own wall time)
 *   REINS_TASK_ID               set by reins; which tasks are slow is a hash of it
 *
 * SIGTERM/SIGINT are passed to the harness (and end the wait at once), so cancelling a rollout
 * behaves as without the wrapper.
 */
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"

const fail = (message) => {
  process.stderr.write(`tail wrapper: ${message}\n`)
  process.exit(2)
}

const setting = (name, fallback, min, max) => {
  const raw = process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  const v = Number(raw)
  if (!Number.isFinite(v) || v < min || v > max) fail(`${name} must be a number in [${min}, ${max}], got ${JSON.stringify(raw)}`)
  return v
}

/** A task's place in [0, 1), the same in every process and mode. */
const taskPlace = (taskId) => createHash("sha256").update(String(taskId)).digest().readUInt32BE(0) / 2 ** 32

const [command, ...args] = process.argv.slice(2)
if (command === undefined) fail("usage: node tail.mjs CMD [ARGS...]")
const tail = setting("REINS_BENCH_TAIL", 1, 1, 1000)
const fraction = setting("REINS_BENCH_TAIL_FRACTION", 0.25, 0, 1)
const unitS = setting("REINS_BENCH_TAIL_UNIT_S", null, 0, 3600)
const slow = tail > 1 && taskPlace(process.env.REINS_TASK_ID ?? "") < fraction

const started = performance.now()
const child = spawn(command, args, { stdio: "inherit" })
let stopping = false
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    stopping = true
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    else process.exit(128 + (signal === "SIGTERM" ? 15 : 2))
  })
}
child.on("error", (e) => fail(`cannot start ${command}: ${e.message}`))
child.on("exit", (code, signal) => {
  const finish = () => {
    if (signal !== null) {
      process.removeAllListeners(signal)
      process.kill(process.pid, signal)
    } else process.exit(code ?? 1)
  }
  if (!slow || stopping) return finish()
  const extraMs = (tail - 1) * (unitS === null ? performance.now() - started : 1000 * unitS)
  setTimeout(finish, extraMs)
})
