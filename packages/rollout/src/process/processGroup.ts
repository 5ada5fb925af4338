/**
 * Runs one command in its own process group and guarantees that, whatever happens, no process
 * of that group outlives it:
 *
 * - `detached: true` makes the child a session and group leader (pgid = pid), so signals go to
 *   the whole group: the harness and everything it started.
 * - timeout or `stop()` → SIGTERM to the group, SIGKILL after `graceMs`.
 * - when the leader exits by itself, stragglers it left behind get the same treatment.
 * - closing the Scope (interruption, shutdown) stops the group and waits for it.
 * - a pid file (JSON: pgid, start time, attempt ids) is kept while the group may be alive, so a
 *   node restarted after kill -9 can reap what the dead node left (see `reapLeftovers`).
 *
 * The supervisor is a daemon fiber nobody can interrupt, and every wait in it is bounded, so it
 * always ends.
 * A process that calls setsid() itself leaves the group and is out of reach (cgroups would be
 * needed for that; Kubernetes gives that isolation).
 */
import { type LogCapture, SpawnError } from "@reins/protocol"
import { Deferred, Duration, Effect, Exit, type Scope } from "effect"
import { spawn } from "node:child_process"
import { rmSync, statSync, writeFileSync } from "node:fs"
import { CappedLog } from "./logCapture.js"
import { groupAlive, readProcStat, signalGroup } from "./procfs.js"

export interface GroupSpec {
  readonly command: ReadonlyArray<string>
  readonly cwd?: string | undefined
  readonly env: Readonly<Record<string, string>>
  readonly timeoutMs: number
  readonly graceMs: number
  readonly stdoutFile: string
  readonly stderrFile: string
  readonly maxLogBytes: number
  /** Written after spawn, removed once the group is gone. */
  readonly pidFile?: string
  /** Recorded in the pid file next to the pgid (the attempt's ids, for the reaper). */
  readonly pidRecord?: Readonly<Record<string, string>>
}

/** Who stopped the group; null when the leader exited by itself. */
export type StoppedBy = "timeout" | "cancel"

export interface GroupExit {
  readonly exitCode: number | null
  readonly signal: NodeJS.Signals | null
  readonly stoppedBy: StoppedBy | null
  /** The reason given to `stop()`. */
  readonly stopReason: string | null
  readonly startedAt: number
  readonly durationMs: number
  readonly stdout: LogCapture
  readonly stderr: LogCapture
  /** The group still had live members after the leader exited (they were killed). */
  readonly hadStragglers: boolean
}

export interface ProcessGroup {
  readonly pid: number
  /** Waits for the group to be gone and the logs closed. */
  readonly exit: Effect.Effect<GroupExit>
  /** SIGTERM, grace, SIGKILL; then waits like `exit`. A no-op on a group that already ended. */
  readonly stop: (reason: string) => Effect.Effect<GroupExit>
}

const poll = Duration.millis(20)

/** Waits until `cond` holds, checking every 20 ms, at most `ms`; true if it held. */
const waitUntil = (cond: () => boolean, ms: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    while (!cond()) {
      if (Date.now() >= deadline) return false
      yield* Effect.sleep(poll)
    }
    return true
  })

const checkCwd = (spec: GroupSpec) =>
  Effect.suspend(() => {
    if (spec.cwd === undefined) return Effect.void
    let ok = false
    try {
      ok = statSync(spec.cwd).isDirectory()
    } catch {
      ok = false
    }
    return ok
      ? Effect.void
      : Effect.fail(new SpawnError({ reason: "bad-cwd", code: "ENOENT", command: spec.command.join(" "), message: `working directory ${spec.cwd} does not exist or is not a directory` }))
  })

const spawnErrorMessage = (command: string, e: NodeJS.ErrnoException) =>
  e.code === "ENOENT"
    ? `command not found: ${command}`
    : e.code === "EACCES"
    ? `permission denied (not executable?): ${command}`
    : `cannot start ${command}: ${e.message}`

export const spawnGroup = (spec: GroupSpec): Effect.Effect<ProcessGroup, SpawnError, Scope.Scope> =>
  Effect.zipRight(checkCwd(spec), Effect.acquireRelease(start(spec), (g) => g.stop("scope closed")))

const start = (spec: GroupSpec): Effect.Effect<ProcessGroup, SpawnError> =>
  Effect.gen(function*() {
    const [file, ...args] = spec.command
    if (file === undefined) {
      return yield* new SpawnError({ reason: "spawn", code: null, command: "", message: "empty command" })
    }
    const leaderExit = yield* Deferred.make<{ code: number | null; signal: NodeJS.Signals | null }>()
    const pipesClosed = yield* Deferred.make<void>()
    const stopRequest = yield* Deferred.make<{ by: StoppedBy; reason: string }>()
    const done = yield* Deferred.make<GroupExit>()
    const [stdout, stderr] = yield* Effect.try({
      try: () => [new CappedLog(spec.stdoutFile, spec.maxLogBytes), new CappedLog(spec.stderrFile, spec.maxLogBytes)] as const,
      catch: (e) =>
        new SpawnError({
          reason: "spawn",
          code: (e as NodeJS.ErrnoException).code ?? null,
          command: file,
          message: `cannot open the log files of ${file}: ${(e as Error).message}`
        })
    })
    const startedAt = Date.now()

    const child = yield* Effect.async<ReturnType<typeof spawn>, SpawnError>((resume) => {
      let c: ReturnType<typeof spawn>
      try {
        c = spawn(file, args, { cwd: spec.cwd, env: spec.env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
      } catch (e) {
        // Invalid arguments (a NUL byte in argv or env, ...) throw instead of emitting 'error'.
        stdout.close()
        stderr.close()
        return resume(Effect.fail(new SpawnError({ reason: "spawn", code: (e as NodeJS.ErrnoException).code ?? null, command: file, message: spawnErrorMessage(file, e as NodeJS.ErrnoException) })))
      }
      stdout.follow(c.stdout!)
      stderr.follow(c.stderr!)
      c.once("exit", (code, signal) => Deferred.unsafeDone(leaderExit, Exit.succeed({ code, signal })))
      c.once("close", () => Deferred.unsafeDone(pipesClosed, Exit.void))
      c.once("spawn", () => resume(Effect.succeed(c)))
      c.once("error", (e: NodeJS.ErrnoException) => {
        if (c.pid !== undefined) return // a later error (e.g. a failed kill) is not a spawn failure
        stdout.close()
        stderr.close()
        resume(Effect.fail(new SpawnError({ reason: "spawn", code: e.code ?? null, command: file, message: spawnErrorMessage(file, e) })))
      })
      c.on("error", () => {}) // never an unhandled 'error' event
    })
    const pgid = child.pid!
    if (spec.pidFile !== undefined) {
      writeFileSync(spec.pidFile, JSON.stringify({ ...spec.pidRecord, pgid, startTime: readProcStat(pgid)?.startTime ?? null }) + "\n")
    }

    let killed = false // SIGKILL already sent to the group
    /** SIGTERM the group, give the leader `graceMs` to exit, then SIGKILL the group. */
    const terminate = Effect.gen(function*() {
      signalGroup(pgid, "SIGTERM")
      const exited = yield* Deferred.await(leaderExit).pipe(Effect.timeoutOption(Duration.millis(spec.graceMs)))
      if (exited._tag === "None") {
        killed = signalGroup(pgid, "SIGKILL") || killed
      }
    })

    const supervise = Effect.gen(function*() {
      const first = yield* Effect.raceAll([
        Deferred.await(leaderExit).pipe(Effect.as(null)),
        Effect.sleep(Duration.millis(spec.timeoutMs)).pipe(
          Effect.as<{ by: StoppedBy; reason: string }>({ by: "timeout", reason: `timed out after ${spec.timeoutMs} ms` })
        ),
        Deferred.await(stopRequest)
      ])
      if (first !== null) yield* terminate
      // SIGKILL cannot be ignored; the bound only guards against a process stuck in the kernel.
      const leader = yield* Deferred.await(leaderExit).pipe(Effect.timeoutOption(Duration.seconds(10)))
      // Stragglers: whatever the harness started and left running (or that ignored SIGTERM).
      const hadStragglers = groupAlive(pgid)
      if (hadStragglers) {
        if (!killed) signalGroup(pgid, "SIGTERM")
        if (!(yield* waitUntil(() => !groupAlive(pgid), killed ? 0 : spec.graceMs))) signalGroup(pgid, "SIGKILL")
        yield* waitUntil(() => !groupAlive(pgid), 2_000)
      }
      // The pipes close when the last holder dies; one that escaped the group could hold them open.
      const closed = yield* Deferred.await(pipesClosed).pipe(Effect.timeoutOption(Duration.seconds(2)))
      if (closed._tag === "None") {
        child.stdout?.destroy()
        child.stderr?.destroy()
      }
      const out = stdout.close()
      const err = stderr.close()
      if (spec.pidFile !== undefined) rmSync(spec.pidFile, { force: true })
      const stop = first
      const exit: GroupExit = {
        exitCode: leader._tag === "Some" ? leader.value.code : null,
        signal: leader._tag === "Some" ? leader.value.signal : "SIGKILL",
        stoppedBy: stop?.by ?? null,
        stopReason: stop?.reason ?? null,
        startedAt,
        durationMs: Date.now() - startedAt,
        stdout: out,
        stderr: err,
        hadStragglers
      }
      yield* Deferred.succeed(done, exit)
    })
    // A daemon: the supervisor must finish its kill sequence even when the fiber that launched
    // the process is interrupted, and nothing holds a reference that could interrupt it. It is
    // made interruptible explicitly: forked inside acquireRelease's uninterruptible acquire it
    // would inherit that, and its own timeouts would then wait for what they time out.
    // Its lifetime is bounded (timeouts everywhere) and the Scope's release waits for it.
    yield* Effect.forkDaemon(Effect.interruptible(supervise))

    return {
      pid: pgid,
      exit: Deferred.await(done),
      stop: (reason: string) =>
        Deferred.succeed(stopRequest, { by: "cancel" as StoppedBy, reason }).pipe(Effect.zipRight(Deferred.await(done)))
    }
  })
