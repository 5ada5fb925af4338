/**
 * The local process launcher: one process group per attempt on this node, logs under the data
 * directory. See `process/processGroup.ts` for the no-orphans guarantees.
 */
import {
  AttemptCancelled,
  AttemptFailed,
  AttemptInfraFailed,
  AttemptLogs,
  type AttemptOutcome,
  AttemptSucceeded
} from "@reins/protocol"
import { Context, Effect, Layer } from "effect"
import { attemptEnv } from "../harness/env.js"
import { prepareAttemptFiles } from "../harness/files.js"
import { type GroupExit, spawnGroup } from "../process/processGroup.js"
import { reapLeftovers } from "../process/reaper.js"
import type { AdoptedAttempt, AttemptHandle, AttemptSpec, Launcher } from "./Launcher.js"

export interface LocalLauncherOptions {
  /** Attempt directories go under `<dataDir>/attempts/`. */
  readonly dataDir: string
  /** Base environment of harnesses with `inherit_env` (default `process.env`). */
  readonly baseEnv?: Readonly<Record<string, string | undefined>>
}

const describeExit = (e: GroupExit) =>
  e.exitCode !== null ? `exit code ${e.exitCode}` : `killed by ${e.signal ?? "unknown signal"}`

/** exit 0 → succeeded; non-zero, timeout or a foreign signal → failed (behaviour); our own stop → cancelled. */
export const classifyExit = (e: GroupExit): AttemptOutcome => {
  const logs = new AttemptLogs({ stdout: e.stdout, stderr: e.stderr })
  const common = { durationMs: e.durationMs, logs }
  if (e.stoppedBy === "cancel") return new AttemptCancelled({ reason: e.stopReason ?? "cancelled", ...common })
  if (e.stoppedBy === "timeout") {
    return new AttemptFailed({ reason: "timeout", exitCode: e.exitCode, signal: e.signal, message: `${e.stopReason} (${describeExit(e)})`, ...common })
  }
  if (e.exitCode === 0) return new AttemptSucceeded({ exitCode: 0, ...common })
  if (e.exitCode !== null) return new AttemptFailed({ reason: "exit", exitCode: e.exitCode, signal: null, message: describeExit(e), ...common })
  return new AttemptFailed({ reason: "signal", exitCode: null, signal: e.signal, message: describeExit(e), ...common })
}

export const makeLocalLauncher = (options: LocalLauncherOptions): Launcher => {
  // Launching an attempt that already runs here joins it (as the Kubernetes launcher does through
  // its Job name): an attempt never runs twice, whatever the caller does.
  const running = new Map<string, AttemptHandle>()

  const launch = (spec: AttemptSpec) =>
    Effect.gen(function*() {
      const existing = running.get(spec.attemptId)
      if (existing !== undefined) return existing
      const files = yield* prepareAttemptFiles(options.dataDir, spec.attemptId, spec.task, spec.taskExtra)
      const h = spec.harness
      const group = yield* spawnGroup({
        command: h.command,
        cwd: h.cwd,
        env: attemptEnv({ spec: h, identity: spec, task: spec.task, endpoints: spec.endpoints, taskFile: files.taskFile, base: options.baseEnv }),
        timeoutMs: h.timeout_s * 1000,
        graceMs: h.grace_s * 1000,
        stdoutFile: files.stdout,
        stderrFile: files.stderr,
        maxLogBytes: h.max_log_bytes,
        nice: h.nice,
        pidFile: files.pidFile,
        pidRecord: { attemptId: spec.attemptId, rolloutId: spec.rolloutId }
      })
      // The attempt is forgotten before anyone hears how it ended (not by a fiber that may run
      // later): whoever sees the outcome can launch the same id again and gets a new run.
      const forget = Effect.sync(() => {
        if (running.get(spec.attemptId) === handle) running.delete(spec.attemptId)
      })
      const ended = (exit: Effect.Effect<GroupExit>) => Effect.map(Effect.zipLeft(exit, forget), classifyExit)
      const handle: AttemptHandle = {
        rolloutId: spec.rolloutId,
        attemptId: spec.attemptId,
        files,
        outcome: ended(group.exit),
        cancel: (reason: string) => ended(group.stop(reason))
      }
      running.set(spec.attemptId, handle)
      // ...and forgotten when nobody asks, too.
      yield* Effect.forkDaemon(handle.outcome)
      return handle
    })

  // Local processes cannot be re-attached after a restart (their pipes died with the old
  // incarnation): kill what it left. Only the first call reaps — later ones (a controller asking
  // again) report the same and never touch attempts this incarnation runs.
  const adopt = Effect.runSync(Effect.cached(reapLeftovers(options.dataDir).pipe(
    Effect.map((leftovers) =>
      leftovers.map((l): AdoptedAttempt => ({
        _tag: "Reaped",
        rolloutId: l.rolloutId,
        attemptId: l.attemptId,
        outcome: new AttemptInfraFailed({
          reason: "node-lost",
          retryable: true,
          message: `the launcher restarted while the attempt ran${l.killed > 0 ? `; ${l.killed} leftover process(es) killed` : ""}`,
          durationMs: 0,
          logs: null
        })
      }))
    )
  )))

  return { kind: "local", dataDir: options.dataDir, launch, adopt }
}

export class LocalLauncher extends Context.Tag("@reins/rollout/LocalLauncher")<LocalLauncher, Launcher>() {
  static readonly layer = (options: LocalLauncherOptions) => Layer.sync(LocalLauncher, () => makeLocalLauncher(options))
}
