/**
 * An attempt's life once it leaves the waiting line: placed on a launcher and followed to its
 * end, then settled — its state, reason and reward recorded, one `AttemptFinished` published, and
 * the rollout either retried with a new attempt (after its backoff) or ended. An attempt whose
 * launcher went away while its Kubernetes Job may still run is handed over instead: it waits
 * (phase `recovering`) for another launcher to take the Job over, and is failed as `node-lost`
 * (then retried) if none does within the recovery window.
 */
import {
  AttemptCancelled,
  AttemptFinished,
  AttemptInfraFailed,
  type AttemptOutcome,
  AttemptResult,
  type LaunchFinished,
  type LaunchSpec,
  type RewardSource,
  RolloutEnded
} from "@reins/protocol"
import { Cause, Deferred, Duration, Effect, PubSub, Stream } from "effect"
import { type EndedState, rewardDecision } from "../outcome.js"
import { retryDelayMs, settleDecision } from "../settle.js"
import { type ControllerContext, logged } from "./context.js"
import type { Entry } from "./entries.js"
import type { LauncherSlot } from "./launcherPool.js"

export type Attempts = ReturnType<typeof makeAttempts>

/**
 * Whether the attempt's Job may run on after its launcher went away: not when the controller
 * cancelled it, nor when the launcher's node shut down with `onStop: "delete"` (it deletes its
 * Jobs: the attempt is retried, as that policy asks); a crash or `leave` keeps it running.
 */
const mayStillRun = (entry: Entry, slot: LauncherSlot, graceful = slot.leftGracefully) =>
  slot.kind === "kubernetes" && entry.harness.kubernetes !== undefined && entry.cancelReason === null && !(graceful && slot.onStop !== "leave")

const LOST = Symbol("lost")
const ABORTED = Symbol("aborted")

export const makeAttempts = ({ finished, ledger, pool, scope, settings, table, wake }: ControllerContext) => {
  const resultOf = (entry: Entry, outcome: AttemptOutcome, startedAt: number | null) =>
    new AttemptResult({ rolloutId: entry.rolloutId, attemptId: entry.attempt.attemptId, outcome, verifier: null, startedAt: startedAt ?? Date.now(), finishedAt: Date.now() })

  /** A `node-lost` infrastructure failure of the entry's current attempt (retryable). */
  const infraFailure = (entry: Entry, message: string, startedAt: number | null) =>
    resultOf(entry, new AttemptInfraFailed({ reason: "node-lost", retryable: true, message, durationMs: startedAt === null ? 0 : Date.now() - startedAt, logs: null }), startedAt)

  const publish = (
    entry: Entry,
    fields: Pick<AttemptFinished, "outcome" | "verifier" | "state" | "reason" | "reward" | "rewardSource" | "dropped" | "final">
  ) =>
    PubSub.publish(
      finished,
      new AttemptFinished({
        rolloutId: entry.rolloutId,
        attemptId: entry.attempt.attemptId,
        attemptIndex: entry.attempt.index,
        groupId: entry.groupId,
        taskId: entry.task.id,
        node: entry.slot?.node ?? null,
        startedAt: entry.startedAt,
        finishedAt: Date.now(),
        ...fields
      })
    )

  const endRollout = (entry: Entry, state: EndedState, reason: string, reward: number | null) =>
    Effect.suspend(() => {
      table.setPhase(entry, "ended")
      const ended = new RolloutEnded({ rolloutId: entry.rolloutId, groupId: entry.groupId, taskId: entry.task.id, state, reason, attempts: entry.attempt.index + 1, reward })
      return Effect.zipRight(Deferred.succeed(entry.ended, ended), wake)
    })

  /** Ends the rollout with an attempt that produced no result of its own (nothing to verify or reward). */
  const endWithout = (entry: Entry, state: EndedState, outcome: AttemptOutcome, reason: string) =>
    Effect.gen(function*() {
      yield* logged("record attempt end", ledger.finish(entry.attempt.attemptId, state, reason))
      yield* publish(entry, { outcome, verifier: null, state, reason, reward: null, rewardSource: null, dropped: false, final: true })
      yield* endRollout(entry, state, reason, null)
    }).pipe(Effect.uninterruptible)

  /** Ends a rollout whose current attempt never reached a launcher (waiting, in backoff or recovering). */
  const cancelWaiting = (entry: Entry, why: string) =>
    Effect.suspend(() => {
      table.setPhase(entry, "ended") // synchronously: the scheduler skips it from now on
      return endWithout(entry, "cancelled", new AttemptCancelled({ reason: why, durationMs: 0, logs: null }), `cancelled: ${why}`)
    }).pipe(Effect.uninterruptible)

  /** The attempt's handling crashed in the controller: the rollout ends (a retry would crash again). */
  const failCrashed = (entry: Entry, message: string) => {
    const reason = `controller error: ${message}`
    return endWithout(entry, "failed", new AttemptInfraFailed({ reason: "lost", retryable: false, message: reason, durationMs: 0, logs: null }), reason)
  }

  /** Records the reward the attempt earned; the one the harness posted to /v1/reward when the verifier gave none. */
  const recordReward = (entry: Entry, result: AttemptResult) =>
    Effect.gen(function*() {
      const none = { reward: null, rewardSource: null, dropped: false }
      const decision = rewardDecision(result, settings.onFailed)
      if (decision._tag === "Drop") return { ...none, dropped: true }
      const attemptId = entry.attempt.attemptId
      if (decision._tag === "Reward") {
        const info = { source: decision.source, verifier: result.verifier?._tag === "VerifierReward" ? result.verifier.details : null }
        const ok = yield* Effect.either(ledger.recordReward(attemptId, decision.value, info))
        if (ok._tag === "Right") return { ...none, reward: decision.value, rewardSource: decision.source as RewardSource }
        yield* Effect.logWarning(`controller: record reward of ${attemptId}: ${ok.left.message}`)
        return none
      }
      if (result.outcome._tag !== "Succeeded" && result.outcome._tag !== "Failed") return none
      const posted = (yield* logged("read reward", ledger.rewardOf(entry.rolloutId, attemptId))) ?? null
      return posted === null ? none : { ...none, reward: posted, rewardSource: "harness" as const }
    })

  /** Records how the attempt ended, its reward, and either retries the rollout or ends it. */
  const settle = (entry: Entry, result: AttemptResult): Effect.Effect<void> =>
    Effect.gen(function*() {
      const { outcome, verifier } = result
      const { reason, retry, state } = settleDecision({
        outcome,
        attemptIndex: entry.attempt.index,
        maxAttempts: settings.maxAttempts,
        cancelReason: entry.cancelReason
      })
      const rewarded = yield* recordReward(entry, result)
      yield* logged("record attempt end", ledger.finish(entry.attempt.attemptId, state, reason))

      const next = retry ? yield* Effect.either(ledger.createAttempt(entry.rolloutId)) : null
      yield* publish(entry, { outcome, verifier, state, reason, ...rewarded, final: next?._tag !== "Right" })
      if (next === null) return yield* endRollout(entry, state, reason, rewarded.reward)
      if (next._tag === "Left") return yield* endRollout(entry, "failed", `${reason}; the retry attempt could not be created: ${next.left.message}`, null)

      const delay = retryDelayMs(next.right.index, settings.backoffInitialMs, settings.backoffMaxMs)
      table.retryWith(entry, next.right, Date.now() + delay)
      if (entry.cancelReason !== null) return yield* cancelWaiting(entry, entry.cancelReason)
      yield* Effect.forkIn(Effect.zipRight(Effect.sleep(Duration.millis(delay)), wake), scope)
    }).pipe(Effect.uninterruptible)

  /** Fails a resumed or handed-over attempt nobody can adopt (an infrastructure failure: retried per the policy). */
  const failRecovered = (entry: Entry, message: string) =>
    Effect.suspend(() => {
      if (entry.phase !== "recovering") return Effect.void
      table.setPhase(entry, "placed") // taken: the recovery deadline and a launcher's report cannot both settle it
      return settle(entry, infraFailure(entry, message, null))
    })

  /** Enters "recovering" until a launcher adopts the attempt or the recovery window ends (then `failRecovered`). */
  const recoverWithin = (entry: Entry, message: string) =>
    Effect.suspend(() => {
      table.setPhase(entry, "recovering")
      const recovery = ++entry.recoveries
      const failLate = Effect.suspend(() =>
        entry.recoveries === recovery ? failRecovered(entry, `${message} within ${Duration.format(settings.recoveryWindow)}`) : Effect.void
      )
      return Effect.asVoid(Effect.forkIn(Effect.zipRight(Effect.sleep(settings.recoveryWindow), failLate), scope))
    })

  /**
   * The attempt's launcher went away while its Kubernetes Job may still run (the node was
   * killed, stopped with `leave`, or its connection broke): the attempt waits for another
   * Kubernetes launcher to take the Job over (asked by the next scheduling passes) instead of
   * being retried, which would run it twice.
   */
  const handOver = (entry: Entry, from: LauncherSlot, why: string) =>
    Effect.gen(function*() {
      yield* Effect.logWarning(`controller: ${why}; attempt ${entry.attempt.attemptId}'s Job may still run: handing it to another Kubernetes launcher`)
      entry.slot = null
      entry.abort = null
      entry.resumed = true
      entry.handedFrom = from.name
      yield* recoverWithin(entry, `${why}, and no Kubernetes launcher took over its Job`)
      yield* wake
    })

  /** Settles as lost, or hands over when its Job may still run. */
  const lostOrHandedOver = (entry: Entry, slot: LauncherSlot, why: string, graceful = slot.leftGracefully) =>
    mayStillRun(entry, slot, graceful) ? handOver(entry, slot, why) : settle(entry, infraFailure(entry, why, entry.startedAt))

  const specOf = (entry: Entry): LaunchSpec => ({
    rolloutId: entry.rolloutId,
    attemptId: entry.attempt.attemptId,
    attemptKey: entry.attempt.key,
    task: entry.task,
    ...(entry.taskExtra === undefined ? {} : { taskExtra: entry.taskExtra }),
    harness: entry.harness,
    endpoints: settings.endpoints,
    ...(entry.resumed ? { adoptOnly: true } : {})
  })

  /** Runs the entry's attempt on `slot` until it ends, then settles it (or requeues or hands it over). */
  const runPlaced = (entry: Entry, slot: LauncherSlot, abort: Deferred.Deferred<void>) =>
    Effect.gen(function*() {
      let finished: LaunchFinished | null = null
      const consume = slot.ref.Launch({ spec: specOf(entry) }).pipe(
        Stream.runForEach((update: LaunchFinished | { readonly _tag: "Started"; readonly startedAt: number }) => {
          if (update._tag === "Finished") return Effect.sync(() => void (finished = update))
          entry.startedAt = update.startedAt
          return logged("record attempt start", ledger.start(entry.attempt.attemptId))
        }),
        Effect.either,
        Effect.disconnect
      )
      const ended = yield* Effect.raceAll([consume, Effect.as(Deferred.await(slot.lost), LOST), Effect.as(Deferred.await(abort), ABORTED)])
      if (finished !== null) {
        const result = (finished as LaunchFinished).result
        const o = result.outcome
        if (o._tag === "InfraFailed" && o.reason === "handed-over" && mayStillRun(entry, slot, false)) {
          return yield* handOver(entry, slot, `launcher ${slot.name} stopped following the attempt (${o.message})`)
        }
        if (o._tag === "Cancelled" && entry.cancelReason === null) {
          // a cancel nobody asked for: the launcher stopped (its node shut down); not the rollout's end
          return yield* settle(entry, infraFailure(entry, `the launcher on ${slot.node} stopped the attempt (${o.reason})`, entry.startedAt))
        }
        return yield* settle(entry, result)
      }
      if (ended === ABORTED) {
        return yield* settle(entry, resultOf(entry, new AttemptCancelled({ reason: entry.cancelReason ?? "aborted", durationMs: 0, logs: null }), entry.startedAt))
      }
      if (ended === LOST) return yield* lostOrHandedOver(entry, slot, `launcher node ${slot.node} went down`)
      if (ended._tag === "Right") return yield* lostOrHandedOver(entry, slot, `launcher on ${slot.node} ended the launch without a result`)
      const e = ended.left
      if (e._tag === "LauncherFull" && entry.startedAt === null) {
        // nothing started: the same attempt waits for another place (briefly, so that a
        // launcher filled by someone else is not asked again in a tight loop)
        slot.max = Math.min(slot.max, e.max)
        table.requeue(entry, Date.now() + 500)
        if (entry.cancelReason !== null) return yield* cancelWaiting(entry, entry.cancelReason)
        return
      }
      // the call broke (node gone, connection lost): place nothing more there until it is
      // rediscovered, and make sure nothing keeps running there
      const broke = e._tag === "ActorUnavailable" || e._tag === "ActorNotFound"
      if (broke) pool.forget(slot)
      // its Job may run on: another launcher takes it over (a cancel would delete it)
      if (broke && mayStillRun(entry, slot, slot.leftGracefully || (e._tag === "ActorUnavailable" && e.reason === "shutting-down"))) {
        return yield* handOver(entry, slot, `the launch on ${slot.node} broke (${e.message})`)
      }
      yield* Effect.forkIn(slot.ref.Cancel({ attemptId: entry.attempt.attemptId, reason: "launch call lost" }).pipe(Effect.timeout("5 seconds"), Effect.ignore), scope)
      return yield* settle(entry, infraFailure(entry, `launch on ${slot.node} failed: ${e.message}`, entry.startedAt))
    })

  /** Places the entry's attempt on `slot` and follows it (in a fiber of the controller's scope). */
  const place = (entry: Entry, slot: LauncherSlot) =>
    Effect.gen(function*() {
      const abort = yield* Deferred.make<void>()
      table.setPhase(entry, "placed")
      entry.slot = slot
      entry.abort = abort
      entry.startedAt = null
      slot.inflight++
      yield* runPlaced(entry, slot, abort).pipe(
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.void
            : Effect.zipRight(
              Effect.logError(`controller: attempt ${entry.attempt.attemptId} crashed`, cause),
              // a bug must not leave the rollout without a terminal state
              entry.phase === "placed" ? failCrashed(entry, Cause.pretty(cause).split("\n")[0] ?? "defect") : Effect.void
            )
        ),
        Effect.ensuring(Effect.zipRight(Effect.sync(() => void slot.inflight--), wake)),
        Effect.forkIn(scope)
      )
    })

  return { place, settle, cancelWaiting, recoverWithin, failRecovered }
}
