/** Shared helpers of the rollout tests: temp data dirs, fixture paths, attempt specs, polling. */
import { HarnessSpec, Task, VerifierSpec } from "@reins/protocol"
import type { AttemptSpec } from "@reins/rollout"
import { Effect } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

export const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url))
export const node = process.execPath

/** A temp dir removed by the returned cleanup (call it from afterAll/afterEach). */
export const tempDir = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), `reins-${prefix}-`))
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

let seq = 0
export const nextId = (prefix = "a") => `${prefix}-${process.pid}-${++seq}`

// The fixtures run at niceness 0, not the launchers' default 19: the test files share two cores,
// and a nice-19 autogroup next to busy ones can wait many seconds for its first slice.
export const harness = (args: ReadonlyArray<string>, fields: Partial<ConstructorParameters<typeof HarnessSpec>[0]> = {}) =>
  new HarnessSpec({ command: [node, fixture("harness.mjs"), ...args], timeout_s: 20, grace_s: 1, nice: 0, ...fields })

export const verifier = (mode: string, fields: Partial<ConstructorParameters<typeof VerifierSpec>[0]> = {}) =>
  new VerifierSpec({ command: [node, fixture("verifier.mjs"), mode], timeout_s: 10, nice: 0, ...fields })

export const attemptSpec = (h: HarnessSpec, fields: Partial<AttemptSpec> = {}): AttemptSpec => {
  const attemptId = fields.attemptId ?? nextId("att")
  return {
    rolloutId: `r-${attemptId}`,
    attemptId,
    attemptKey: `key-${attemptId}`,
    task: new Task({ id: "t1", input: { question: "2+2?" } }),
    taskExtra: { answer: 4 },
    harness: h,
    endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" },
    ...fields
  }
}

/** Polls `cond` every 20 ms for at most `ms`. */
export const waitFor = (cond: () => boolean, ms = 5_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    while (!cond()) {
      if (Date.now() > deadline) return yield* Effect.die(new Error(`condition not met within ${ms} ms`))
      yield* Effect.sleep("20 millis")
    }
  })

/** Waits for a pid file written by a fixture and returns the pid (generous: Node starts slowly on a busy machine). */
export const readPidFile = (path: string) =>
  waitFor(() => existsSync(path) && readFileSync(path, "utf8").trim() !== "", 15_000).pipe(
    Effect.map(() => Number(readFileSync(path, "utf8").trim()))
  )

/** Alive and not a zombie (zombies are dead processes an init has not reaped yet). */
export const alive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]
    return state !== "Z" && state !== "X"
  } catch {
    return false
  }
}

/** Best-effort kill for cleanup after a failed assertion. */
export const killQuietly = (pid: number) => {
  try {
    process.kill(pid, "SIGKILL")
  } catch {
    // gone
  }
}
