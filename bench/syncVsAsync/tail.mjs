/**
 * The `--tail X` knob of bench/sync-vs-async.ts, loaded into the harness's own Node process
 * (`node --import tail.mjs harness.mjs ...`): the harness runs unchanged (same output, same exit
 * code) and, for a deterministic share of the tasks — the "slow" ones, like tasks whose test suite
 * is slow — its process stays alive (X − 1) × a fixed unit after it finished, so those rollouts
 * last about X times as long. A preload rather than a wrapper process: on a machine where the
 * harnesses' CPU bounds the run, a second Node process per rollout would cost as much CPU as the
 * harness itself. The wait uses none (a blocking `Atomics.wait`). X = 1 adds nothing: the natural
 * spread. Every mode of the benchmark sees the same tasks slow, for the same time.
 *
 *   REINS_BENCH_TAIL            X >= 1 (default 1)
 *   REINS_BENCH_TAIL_FRACTION   share of tasks that are slow, 0..1 (default 0.25)
 *   REINS_BENCH_TAIL_UNIT_S     the unit in seconds (required when X > 1)
 *   REINS_TASK_ID               set by reins; which tasks are slow is a hash of it
 *
 * The settings are removed from the environment once read, so the Node processes the harness
 * starts itself (mini-swe's test runs) do not wait too. A harness that exits with a signal's code
 * (>= 128: it was stopped) does not wait, and a SIGTERM during the wait ends the process at once,
 * so cancelling a rollout behaves as without the tail.
 */
import { createHash } from "node:crypto"

const fail = (message) => {
  process.stderr.write(`tail: ${message}\n`)
  process.exit(2)
}

const setting = (name, fallback, min, max) => {
  const raw = process.env[name]
  delete process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  const v = Number(raw)
  if (!Number.isFinite(v) || v < min || v > max) fail(`${name} must be a number in [${min}, ${max}], got ${JSON.stringify(raw)}`)
  return v
}

/** A task's place in [0, 1), the same in every process and mode. */
const taskPlace = (taskId) => createHash("sha256").update(String(taskId)).digest().readUInt32BE(0) / 2 ** 32

const tail = setting("REINS_BENCH_TAIL", 1, 1, 1000)
const fraction = setting("REINS_BENCH_TAIL_FRACTION", 0.25, 0, 1)
const unitS = setting("REINS_BENCH_TAIL_UNIT_S", null, 0, 3600)
if (tail > 1 && unitS === null) fail("REINS_BENCH_TAIL_UNIT_S must be set when REINS_BENCH_TAIL > 1")
const slow = tail > 1 && taskPlace(process.env.REINS_TASK_ID ?? "") < fraction

if (slow) {
  process.on("exit", (code) => {
    if (code >= 128) return
    // Default signal dispositions again: a SIGTERM now ends the process instead of waiting for a
    // JavaScript handler that cannot run while this thread sleeps.
    for (const signal of ["SIGTERM", "SIGINT"]) process.removeAllListeners(signal)
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, (tail - 1) * unitS * 1000)
  })
}
