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
import { Deferred, Duration, Effect, Exit, FiberId, type Scope } from "effect"
import { rmSync, statSync, writeFileSync } from "node:fs"
import { CappedLog } from "./logCapture.js"
import { groupAlive, readProcStat, signalGroup } from "./procfs.js"
import { type SpawnedChild, spawnDetached } from "./spawner.js"

export interface GroupSpec {
  readonly command: ReadonlyArray<string>
  readonly cwd?: string | undefined
  readonly env: Readonly<Record<string, string>>
  readonly timeoutMs: number
  readonly graceMs: number
  readonly stdoutFile: string
  readonly stderrFile: string
  readonly maxLogBytes: number
  /** Niceness of the group (its leader and its session's autogroup); 0 leaves it as inherited. */
  readonly nice?: number
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
  readonly durationMs: number
  readonly stdout: LogCapture
  readonly stderr: LogCapture
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

const isDirectory = (path: string) => {
  try {
    return statSync(path).isDirectory()
  } catch {
    return false
  }
}

const checkCwd = (spec: GroupSpec) =>
  Effect.suspend(() =>
    spec.cwd === undefined || isDirectory(spec.cwd)
      ? Effect.void
      : Effect.fail(new SpawnError({ reason: "bad-cwd", code: "ENOENT", command: spec.command.join(" "), message: `working directory ${spec.cwd} does not exist or is not a directory` }))
  )

/** A failure of this node (disk full, permissions) before anything could start: `what` and the system's message. */
export const localSpawnError = (e: unknown, command: string, what: string) =>
  new SpawnError({ reason: "spawn", code: (e as NodeJS.ErrnoException).code ?? null, command, message: `${what}: ${(e as Error).message}` })

const spawnErrorMessage = (command: string, e: NodeJS.ErrnoException) =>
  e.code === "ENOENT"
    ? `command not found: ${command}`
    : e.code === "EACCES"
    ? `permission denied (not executable?): ${command}`
    : `cannot start ${command}: ${e.message}`

export const spawnGroup = (spec: GroupSpec): Effect.Effect<ProcessGroup, SpawnError, Scope.Scope> =>
  Effect.zipRight(checkCwd(spec), Effect.acquireRelease(start(spec), (g) => g.stop("scope closed")))

export type ProcessGroup = Effect.Effect.Success<ReturnType<typeof start>>

const start = (spec: GroupSpec) =>
  Effect.gen(function*() {
    const [file, ...args] = spec.command
    if (file === undefined) {
      return yield* new SpawnError({ reason: "spawn", code: null, command: "", message: "empty command" })
    }
    // Node reports through callbacks; Deferreds hand the news to the supervisor. `trigger` is the
    // first of: the leader exited (null), the timeout fired, `stop()` was called.
    type Trigger = { readonly by: StoppedBy; readonly reason: string } | null
    let exitInfo: { readonly code: number | null; readonly signal: NodeJS.Signals | null } | null = null
    const leaderExit = Deferred.unsafeMake<void>(FiberId.none)
    const pipesClosed = Deferred.unsafeMake<void>(FiberId.none)
    const trigger = Deferred.unsafeMake<Trigger>(FiberId.none)
    const done = Deferred.unsafeMake<GroupExit>(FiberId.none)
    const [stdout, stderr] = yield* Effect.try({
      try: () => [new CappedLog(spec.stdoutFile, spec.maxLogBytes), new CappedLog(spec.stderrFile, spec.maxLogBytes)] as const,
      catch: (e) => localSpawnError(e, file, `cannot open the log files of ${file}`)
    })
    const startedAt = Date.now()

    const child = yield* Effect.async<SpawnedChild, SpawnError>((resume) => {
      // Through the spawner process: a fork of this (large) process would stall the device.
      const c = spawnDetached(file, args, { cwd: spec.cwd, env: spec.env, nice: spec.nice })
      stdout.follow(c.stdout)
      stderr.follow(c.stderr)
      c.once("exit", (code, signal) => {
        exitInfo = { code, signal }
        Deferred.unsafeDone(leaderExit, Exit.void)
        Deferred.unsafeDone(trigger, Exit.succeed(null))
      })
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
    // A plain timer: it is cleared on the common path, and an Effect.sleep race would cost fibers
    // on every attempt (launch overhead is what the rollout bench measures).
    const timer = setTimeout(
      () => Deferred.unsafeDone(trigger, Exit.succeed({ by: "timeout", reason: `timed out after ${spec.timeoutMs} ms` })),
      Math.min(spec.timeoutMs, 2 ** 31 - 1)
    )

    let killed = false // SIGKILL already sent to the group
    /** SIGTERM the group, give the leader `graceMs` to exit, then SIGKILL the group. */
    const terminate = Effect.gen(function*() {
      signalGroup(pgid, "SIGTERM")
      if (!(yield* within(leaderExit, spec.graceMs))) killed = signalGroup(pgid, "SIGKILL") || killed
    })

    const supervise = Effect.gen(function*() {
      const first = yield* Deferred.await(trigger)
      clearTimeout(timer)
      if (first !== null) yield* terminate
      // SIGKILL cannot be ignored; the bound only guards against a process stuck in the kernel.
      yield* within(leaderExit, 10_000)
      // Stragglers: whatever the harness started and left running (or that ignored SIGTERM).
      if (groupAlive(pgid)) {
        if (!killed) signalGroup(pgid, "SIGTERM")
        if (!(yield* waitUntil(() => !groupAlive(pgid), killed ? 0 : spec.graceMs))) signalGroup(pgid, "SIGKILL")
        yield* waitUntil(() => !groupAlive(pgid), 2_000)
      }
      // The pipes close when the last holder dies; one that escaped the group could hold them open.
      if (!(yield* within(pipesClosed, 2_000))) child.detach()
      if (spec.pidFile !== undefined) rmSync(spec.pidFile, { force: true })
      const leader = exitInfo as { readonly code: number | null; readonly signal: NodeJS.Signals | null } | null
      yield* Deferred.succeed(done, {
        exitCode: leader?.code ?? null,
        signal: leader === null ? "SIGKILL" : leader.signal,
        stoppedBy: first?.by ?? null,
        stopReason: first?.reason ?? null,
        durationMs: Date.now() - startedAt,
        stdout: stdout.close(),
        stderr: stderr.close()
      })
    })
    // A daemon: the supervisor must finish its kill sequence even when the fiber that launched
    // the process is interrupted, and nothing holds a reference that could interrupt it. It is
    // made interruptible explicitly: forked inside acquireRelease's uninterruptible acquire it
    // would inherit that, and its own timeouts would then wait for what they time out.
    // Its lifetime is bounded (timeouts everywhere) and the Scope's release waits for it.
    yield* Effect.forkDaemon(Effect.interruptible(supervise))

    return {
      /** Waits for the group to be gone and the logs closed. */
      exit: Deferred.await(done),
      /** SIGTERM, grace, SIGKILL; then waits like `exit`. A no-op on a group that already ended. */
      stop: (reason: string): Effect.Effect<GroupExit> =>
        Effect.sync(() => Deferred.unsafeDone(trigger, Exit.succeed({ by: "cancel", reason }))).pipe(Effect.zipRight(Deferred.await(done)))
    }
  })

/** Waits for `d` at most `ms`; true if it completed (no fiber is forked when it already has). */
const within = (d: Deferred.Deferred<void>, ms: number): Effect.Effect<boolean> =>
  Effect.flatMap(Deferred.isDone(d), (isDone) =>
    isDone
      ? Effect.succeed(true)
      : Deferred.await(d).pipe(Effect.timeoutTo({ duration: Duration.millis(ms), onSuccess: () => true, onTimeout: () => false })))
