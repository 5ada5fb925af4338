/**
 * Following one attempt's Job: a fiber per attempt waits for the verdict (classify.ts), deletes
 * a Job that has not ended by itself (cancelled, stuck on infrastructure, past its give-up time),
 * captures the pod log and completes the attempt's outcome.
 *
 * Only the Job's owner deletes it: before a delete the Job is read again, and one that another
 * launcher has taken over meanwhile (its `reins.dev/owner` label changed) is left alone. A Job
 * taken over while followed here ends this follower with a `handed-over` outcome, never a
 * delete.
 *
 * When the launcher itself stops (its node shuts down) the follower is interrupted: with
 * `onScopeClose: "delete"` the Job is deleted and the attempt is an infrastructure failure
 * (retried elsewhere); with `"leave"` the Job keeps running and the outcome is `handed-over`, so
 * that the controller hands the attempt to another launcher instead of retrying it.
 */
import {
  AttemptCancelled,
  AttemptFailed,
  AttemptInfraFailed,
  type AttemptLogs,
  type AttemptOutcome,
  AttemptSucceeded
} from "@reins/protocol"
import { Deferred, Duration, Effect, Fiber, Option, type Scope } from "effect"
import type { AttemptFiles } from "../../harness/files.js"
import type { AttemptHandle } from "../Launcher.js"
import type { KubeApi } from "./api.js"
import { classifyJob, type JobObservation, type JobVerdict } from "./classify.js"
import type { FailureLog } from "./failureLog.js"
import { capturePodLogs } from "./logs.js"
import { LABEL_ATTEMPT, labelValue, ownerOf } from "./names.js"
import type { JobTracker } from "./tracker.js"

export interface Followed {
  readonly namespace: string
  readonly name: string
  readonly rolloutId: string
  readonly attemptId: string
  readonly container: string | undefined
  readonly maxLogBytes: number
  readonly giveUpAt: number
  readonly startedAt: number
  readonly files: AttemptFiles
}

type Decision =
  | Exclude<JobVerdict, { readonly _tag: "Running" }>
  | { readonly _tag: "Cancel"; readonly reason: string }
  | { readonly _tag: "GiveUp" }
  | { readonly _tag: "TakenOver"; readonly owner: string }

export interface FollowerDeps {
  readonly api: KubeApi
  readonly tracker: JobTracker
  /** This launcher's owner label value. */
  readonly owner: string
  readonly leaveJobs: boolean
  readonly launcherScope: Scope.Scope
  /** Handles by Job name (one follower per Job in this launcher). */
  readonly handles: Map<string, AttemptHandle>
  readonly failures: FailureLog
}

/** Another launcher's label on the Job: it took the Job over (a relabel, or a watch that saw it leave our selector). */
const takenOverBy = (o: JobObservation, owner: string): string | null => {
  const current = ownerOf(o.job)
  return current !== undefined && current !== owner ? current : null
}

export const makeFollower = (deps: FollowerDeps) => {
  const { api, tracker } = deps

  /** Deletes the Job if it is still ours (a Job taken over by another launcher is theirs to end). */
  const deleteOwned = (f: Followed) =>
    api.readJob(f.namespace, f.name).pipe(
      Effect.flatMap((found) => {
        if (Option.isNone(found)) return Effect.void
        const current = ownerOf(found.value)
        if (current !== undefined && current !== deps.owner) return Effect.logInfo(`Job ${f.name} belongs to launcher ${current} now; not deleting it`)
        return api.deleteJob(f.namespace, f.name)
      }),
      Effect.catchAll((e) => deps.failures.warn(`delete ${e.status ?? "network"}`, `could not delete Job ${f.name}: ${e.message}`))
    )

  const outcomeOf = (f: Followed, d: Exclude<Decision, { readonly _tag: "TakenOver" }>, logs: AttemptLogs): AttemptOutcome => {
    const durationMs = Date.now() - f.startedAt
    switch (d._tag) {
      case "Succeeded":
        return new AttemptSucceeded({ exitCode: d.exitCode, durationMs, logs })
      case "Failed":
        return new AttemptFailed({ reason: d.reason, exitCode: d.exitCode, signal: null, message: d.message, durationMs, logs })
      case "Infra":
        return new AttemptInfraFailed({ reason: d.reason, retryable: d.retryable, message: d.message, durationMs, logs })
      case "Cancel":
        return new AttemptCancelled({ reason: d.reason, durationMs, logs })
      case "GiveUp":
        return new AttemptInfraFailed({
          reason: "lost",
          retryable: true,
          message: `Job ${f.name} did not end by ${new Date(f.giveUpAt).toISOString()} (unschedulable or stuck); deleted`,
          durationMs,
          logs
        })
    }
  }

  /** An infrastructure outcome without logs (none were captured); a hand-over is never retried: its Job runs on. */
  const infraWithoutLogs = (f: Followed, reason: "handed-over" | "node-lost", message: string) =>
    new AttemptInfraFailed({ reason, retryable: reason === "node-lost", message, durationMs: Date.now() - f.startedAt, logs: null })

  const takenOver = (f: Followed, owner: string) =>
    infraWithoutLogs(f, "handed-over", `Job ${f.name} was taken over by launcher ${owner}, which follows it now`)

  /**
   * The launcher is shutting down (its node stops). "delete": no Job outlives it, and the
   * attempt is retried elsewhere. "leave": the Job keeps running for another launcher to take
   * over, so the outcome says so and must not cause a retry.
   */
  const stopped = (f: Followed, done: Deferred.Deferred<AttemptOutcome>) =>
    deps.leaveJobs
      ? Deferred.succeed(
        done,
        infraWithoutLogs(f, "handed-over", `the launcher stopped following Job ${f.name} and left it running for another launcher to take over`)
      )
      : deleteOwned(f).pipe(
        Effect.zipRight(Deferred.succeed(done, infraWithoutLogs(f, "node-lost", `the launcher stopped (its node shut down) and deleted Job ${f.name}`)))
      )

  /** The follower of one attempt: waits for the verdict, cleans up, captures logs, completes `done`. */
  const follow = (f: Followed, cancel: Deferred.Deferred<string>, done: Deferred.Deferred<AttemptOutcome>) =>
    Effect.gen(function*() {
      const decision: Decision = yield* Effect.raceAll([
        tracker.waitFor(f.name, (o) => {
          const owner = takenOverBy(o, deps.owner)
          if (owner !== null) return Option.some<Decision>({ _tag: "TakenOver", owner })
          const v = classifyJob(o, f.container)
          return v._tag === "Running" ? Option.none() : Option.some<Decision>(v)
        }),
        Deferred.await(cancel).pipe(Effect.map((reason): Decision => ({ _tag: "Cancel", reason }))),
        Effect.sleep(Duration.millis(Math.max(0, f.giveUpAt - Date.now()))).pipe(Effect.as<Decision>({ _tag: "GiveUp" }))
      ])
      if (decision._tag === "TakenOver") return yield* Deferred.succeed(done, takenOver(f, decision.owner))
      // A Job that has not ended by itself must not keep running (and holding a node).
      const ended = decision._tag === "Succeeded" || decision._tag === "Failed"
      if (!ended) yield* deleteOwned(f)
      let final = decision
      if (ended) {
        // Pod events may lag the Job's: take a fresh look before the verdict is final (an
        // OOM-killed harness also fails its Job, but it is the infrastructure's failure).
        const pods = yield* Effect.either(api.listPods(f.namespace, `${LABEL_ATTEMPT}=${labelValue(f.attemptId)}`))
        if (pods._tag === "Right") tracker.setPods(f.name, pods.right.items)
        const fresh = classifyJob(tracker.observe(f.name), f.container)
        if (fresh._tag !== "Running") final = fresh
      }
      const logs = yield* capturePodLogs({
        api,
        namespace: f.namespace,
        pods: tracker.observe(f.name).pods,
        container: f.container,
        files: f.files,
        maxLogBytes: f.maxLogBytes
      })
      yield* Deferred.succeed(done, outcomeOf(f, final, logs))
    }).pipe(
      Effect.onInterrupt(() => stopped(f, done)),
      Effect.ensuring(Effect.sync(() => {
        tracker.untrack(f.name)
        deps.handles.delete(f.name)
      }))
    )

  /** Starts following a tracked Job; the handle's scope deletes (or leaves) it when closed. */
  const startFollowing = (f: Followed): Effect.Effect<AttemptHandle, never, Scope.Scope> =>
    Effect.gen(function*() {
      const cancel = yield* Deferred.make<string>()
      const done = yield* Deferred.make<AttemptOutcome>()
      const fiber = yield* Effect.forkIn(follow(f, cancel, done), deps.launcherScope)
      // A launch that completes while the launcher is already stopping forks its follower into a
      // closing scope: interrupted before it ran, it never settles `done`, so the end of the fiber
      // settles it (the launcher stopped) rather than leaving the attempt waiting forever.
      const outcome = Fiber.await(fiber).pipe(
        Effect.zipRight(Effect.flatMap(Deferred.isDone(done), (isDone) => (isDone ? Effect.void : Effect.asVoid(stopped(f, done))))),
        Effect.zipRight(Deferred.await(done))
      )
      const handle: AttemptHandle = {
        rolloutId: f.rolloutId,
        attemptId: f.attemptId,
        files: f.files,
        outcome,
        cancel: (reason) => Deferred.succeed(cancel, reason).pipe(Effect.zipRight(outcome))
      }
      deps.handles.set(f.name, handle)
      yield* Effect.addFinalizer(() =>
        deps.leaveJobs ? Effect.asVoid(Fiber.interrupt(fiber)) : Effect.asVoid(handle.cancel("scope closed"))
      )
      return handle
    })

  return { startFollowing, deleteOwned }
}
