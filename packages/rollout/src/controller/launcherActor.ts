/**
 * The launcher actor `rollout/<node id>`: runs attempts on this node with a `Launcher` (local
 * processes by default, Kubernetes Jobs when configured), at most `maxConcurrent` at a time.
 *
 * `Launch` streams `Started` then `Finished` (harness and verifier done). The attempt lives as
 * long as that call: if the caller interrupts it or goes away, the attempt's scope closes and
 * the launcher stops it (kills the process group / deletes the Job, or leaves the Job for a
 * successor with `onScopeClose: "leave"`). `Cancel` stops it too but still answers the launch
 * with a `Cancelled` outcome and the attempt's logs.
 *
 * `Adopt` (asked by a controller when it discovers this launcher) takes over what earlier
 * incarnations left: Kubernetes Jobs of this launcher's owner identity, found by label, are
 * followed again and kept here until a controller joins them with an `adoptOnly` launch of the
 * same attempt (or cancels them); their Jobs live as long as this actor. `TakeOver` does the same
 * for attempts a controller hands over from a launcher that went away. Local process groups
 * cannot be re-attached: they were reaped when this actor started and are reported as `gone`.
 */
import {
  AdoptedAttempts,
  type HandedAttempt,
  AttemptAlreadyRunning,
  AttemptNotAdopted,
  LauncherCapacity,
  launcherActorName,
  LauncherFull,
  type LaunchConfigError,
  LauncherRpcs,
  LaunchFinished,
  LaunchStarted,
  type LaunchSpec,
  type LaunchUpdate
} from "@reins/protocol"
import { Actor, ActorContext, type ActorSystem } from "@reins/runtime"
import { Effect, Layer, Queue, Scope, Stream } from "effect"
import { followAttempt, runAttempt } from "../attempt.js"
import { readAttemptLogs } from "../harness/logTails.js"
import type { AdoptedAttempt, AttemptHandle, Launcher } from "../launcher/Launcher.js"
import { makeLocalLauncher } from "../launcher/local.js"
import type { KubernetesLauncherOptions } from "../launcher/k8s/launcher.js"

/** The launcher actor, registered once per node as `rollout/<node id>`. */
export const LauncherActor = Actor.make("rollout", LauncherRpcs)

export interface LauncherActorOptions {
  /** Attempts running at once on this node (default 8). Launches beyond it fail with `LauncherFull`. */
  readonly maxConcurrent?: number
}

export type LauncherSelection =
  | { readonly kind: "local"; readonly dataDir: string }
  | ({ readonly kind: "kubernetes" } & KubernetesLauncherOptions)

interface Running {
  handle: AttemptHandle | null
  /** A cancel that arrived before the harness was running. */
  cancelled: string | null
}

/** The handlers over an existing `Launcher` (what `launcherActorLayer` builds; exposed for tests and embedding). */
export const makeLauncherHandlers = (launcher: Launcher, options: LauncherActorOptions = {}) =>
  Effect.gen(function*() {
    const self = yield* ActorContext
    const max = Math.max(1, Math.floor(options.maxConcurrent ?? 8))
    const running = new Map<string, Running>()
    /** Attempts taken over by `Adopt`, until a launch joins them and reports their end (or a cancel). */
    const adopted = new Map<string, AttemptHandle>()
    const incarnation = yield* Effect.scope

    const launch = (spec: LaunchSpec) =>
      Stream.unwrapScoped(
        Effect.gen(function*() {
          if (running.has(spec.attemptId)) return yield* new AttemptAlreadyRunning({ node: self.node, attemptId: spec.attemptId })
          const join = adopted.get(spec.attemptId)
          if (join === undefined && spec.adoptOnly === true) return yield* new AttemptNotAdopted({ node: self.node, attemptId: spec.attemptId })
          // joining an adopted attempt takes no new place: it runs already
          if (join === undefined && running.size >= max) return yield* new LauncherFull({ node: self.node, max, running: running.size })
          const entry: Running = { handle: null, cancelled: null }
          running.set(spec.attemptId, entry)
          yield* Effect.addFinalizer(() => Effect.sync(() => running.delete(spec.attemptId)))
          const updates = yield* Queue.unbounded<LaunchUpdate>()
          const onStarted = (handle: AttemptHandle) =>
            Effect.gen(function*() {
              entry.handle = handle
              yield* Queue.offer(updates, new LaunchStarted({ node: self.node, startedAt: Date.now() }))
              if (entry.cancelled !== null) yield* Effect.forkDaemon(handle.cancel(entry.cancelled))
            })
          const run = join === undefined
            ? Effect.scoped(runAttempt(launcher, spec, { onStarted }))
            // reported once: a later launch of it is a fresh one (which, for a Job, joins it again by name)
            : Effect.tap(followAttempt(launcher.kind, spec, join, { onStarted }), () => Effect.sync(() => adopted.delete(spec.attemptId)))
          yield* run.pipe(
            Effect.flatMap((result) => Queue.offer(updates, new LaunchFinished({ node: self.node, result }))),
            Effect.forkScoped
          )
          return Stream.fromQueue(updates).pipe(Stream.takeUntil((u) => u._tag === "Finished"))
        })
      )

    /** What was adopted or taken over, kept until a launch joins it, as the controller sees it. */
    const report = (found: ReadonlyArray<AdoptedAttempt>) => {
      const following: Array<string> = []
      const gone: Array<string> = []
      for (const a of found) {
        if (a._tag === "Reaped") gone.push(a.attemptId)
        else if (!running.has(a.handle.attemptId)) {
          if (!adopted.has(a.handle.attemptId)) adopted.set(a.handle.attemptId, a.handle)
          following.push(a.handle.attemptId)
        }
      }
      return new AdoptedAttempts({ following, gone })
    }

    const takeOver = (attempts: ReadonlyArray<HandedAttempt>) =>
      launcher.takeOver === undefined
        ? Effect.succeed(new AdoptedAttempts({ following: [], gone: attempts.map((a) => a.attemptId) }))
        : launcher.takeOver(attempts).pipe(Scope.extend(incarnation), Effect.map(report))

    return LauncherRpcs.of({
      Launch: ({ spec }) => launch(spec),
      Cancel: ({ attemptId, reason }) =>
        Effect.suspend(() => {
          const entry = running.get(attemptId)
          if (entry === undefined) {
            const orphan = adopted.get(attemptId)
            if (orphan === undefined) return Effect.succeed(false)
            adopted.delete(attemptId)
            return Effect.as(orphan.cancel(reason), true)
          }
          if (entry.handle === null) {
            entry.cancelled = reason
            return Effect.succeed(true)
          }
          // the Launch stream reports the Cancelled outcome; answer once it is stopped
          return Effect.as(entry.handle.cancel(reason), true)
        }),
      Adopt: () =>
        launcher.adopt.pipe(
          Scope.extend(incarnation),
          Effect.map(report),
          Effect.catchAll((e) =>
            Effect.as(Effect.logWarning(`launcher: adopting what a previous run left failed: ${e.message}`), new AdoptedAttempts({ following: [], gone: [] }))
          )
        ),
      TakeOver: ({ attempts }) => takeOver(attempts),
      Capacity: () =>
        Effect.succeed(
          new LauncherCapacity({
            node: self.node,
            kind: launcher.kind,
            max,
            running: running.size,
            ...(launcher.kind === "kubernetes" ? { onStop: launcher.leavesJobsRunning === true ? "leave" as const : "delete" as const } : {})
          })
        ),
      Logs: ({ attemptId }) =>
        Effect.try(() => readAttemptLogs(launcher.dataDir, attemptId)).pipe(
          Effect.catchAll((e) => Effect.as(Effect.logWarning(`launcher: reading the logs of ${attemptId} failed: ${String(e.error)}`), []))
        ),
      Ping: () => Effect.succeed({ actor: self.name, node: self.node, incarnation: self.incarnation })
    })
  })

/**
 * The launcher for a selection (the Kubernetes one lives as long as the actor's incarnation). The
 * Kubernetes client is loaded only when selected: it adds seconds to every node's start.
 */
export const selectLauncher = (selection: LauncherSelection) =>
  selection.kind === "local"
    ? Effect.succeed<Launcher>(makeLocalLauncher({ dataDir: selection.dataDir }))
    : Effect.flatMap(
      Effect.promise(() => import("../launcher/k8s/launcher.js")),
      (k8s): Effect.Effect<Launcher, LaunchConfigError, Scope.Scope> => k8s.makeKubernetesLauncher(selection)
    )

/**
 * The launcher actor of this node, as `rollout/<node id>`. Local launchers first kill what a
 * previous incarnation on this data directory left running (its attempts are reported lost by the
 * controller when their calls broke).
 */
export const launcherActorLayer = (
  selection: LauncherSelection,
  options: LauncherActorOptions = {}
): Layer.Layer<never, unknown, ActorSystem> =>
  LauncherActor.toLayer(
    Effect.gen(function*() {
      const launcher = yield* selectLauncher(selection)
      if (selection.kind === "local") {
        yield* launcher.adopt.pipe(
          Effect.tap((reaped) => (reaped.length > 0 ? Effect.logWarning(`launcher: killed ${reaped.length} attempt(s) left by a previous run`) : Effect.void)),
          Effect.catchAll((e) => Effect.logWarning(`launcher: could not reap leftovers: ${e.message}`)),
          Effect.scoped
        )
      }
      return yield* makeLauncherHandlers(launcher, options)
    }),
    { name: launcherActorName }
  )

/** What stopping a node does to the Kubernetes Jobs its launcher follows. */
export type RolloutOnStop = "delete" | "leave"

export interface LauncherEnvOptions {
  /** The node's data directory: attempt files go under `<dataDir>/rollout`. */
  readonly dataDir: string
  /** The node's id: the owner identity of the Jobs its launcher creates. */
  readonly nodeId: string
  readonly env?: Readonly<Record<string, string | undefined>>
  /** Overrides `REINS_ROLLOUT_ON_STOP` (the `reins node --rollout-on-stop` flag). */
  readonly onStop?: RolloutOnStop | undefined
}

/**
 * The launcher actor of a `reins node --roles rollout`, configured from the environment:
 * `REINS_ROLLOUT_LAUNCHER` = `local` (default) | `kubernetes` (kubeconfig from the usual places,
 * `REINS_ROLLOUT_NAMESPACES` = comma-separated namespaces to adopt Jobs in, default `default`;
 * `REINS_ROLLOUT_ON_STOP` = `delete` (default: stopping the node deletes its Jobs) | `leave`
 * (they keep running for the controller to hand to another node: rolling updates)), and
 * `REINS_ROLLOUT_CONCURRENCY` = attempts at once on this node (default 8). The node id is the
 * owner identity of its Jobs: a node restarted with the same id adopts its own Jobs, never
 * another node's. Attempt files go under `<dataDir>/rollout`.
 */
export const launcherActorLayerFromEnv = (options: LauncherEnvOptions): Layer.Layer<never, unknown, ActorSystem> => {
  const env = options.env ?? process.env
  const dir = `${options.dataDir.replace(/\/+$/, "")}/rollout`
  const kind = env.REINS_ROLLOUT_LAUNCHER ?? "local"
  const concurrency = Number(env.REINS_ROLLOUT_CONCURRENCY ?? "8")
  const onStop = options.onStop ?? env.REINS_ROLLOUT_ON_STOP ?? "delete"
  if (kind !== "local" && kind !== "kubernetes") {
    return Layer.fail(new Error(`REINS_ROLLOUT_LAUNCHER=${kind}: expected local or kubernetes`))
  }
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    return Layer.fail(new Error(`REINS_ROLLOUT_CONCURRENCY=${env.REINS_ROLLOUT_CONCURRENCY}: expected a positive integer`))
  }
  if (onStop !== "delete" && onStop !== "leave") {
    return Layer.fail(new Error(`REINS_ROLLOUT_ON_STOP=${onStop}: expected delete or leave`))
  }
  const namespaces = (env.REINS_ROLLOUT_NAMESPACES ?? "default").split(",").map((n) => n.trim()).filter((n) => n !== "")
  return launcherActorLayer(
    kind === "local" ? { kind, dataDir: dir } : { kind, dataDir: dir, namespaces, owner: options.nodeId, onScopeClose: onStop },
    { maxConcurrent: concurrency }
  )
}
