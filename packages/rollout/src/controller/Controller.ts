/**
 * The Rollout Controller: takes task groups (a GRPO group is `size` rollouts of one task), asks
 * the admission hook before starting each attempt, places attempts on the launcher actors of the
 * cluster by free capacity, classifies how they ended, retries infrastructure failures as new
 * attempts, records states and rewards through the `AttemptLedger`, and pushes one
 * `AttemptFinished` event per attempt to subscribers.
 *
 * Invariants:
 * - every rollout ends in exactly one terminal state (`succeeded` | `failed` | `cancelled`) with a
 *   reason; nothing is dropped: a refused or unplaceable rollout waits and is asked again;
 * - a rollout has at most one attempt placed at any time, and a retry is a new ledger attempt
 *   (new key) created only after the previous one was recorded as ended;
 * - a launcher node that goes down (membership `MemberDown`, or its calls breaking) turns its
 *   attempts into `node-lost` infrastructure failures, retried on live nodes — except attempts
 *   whose Kubernetes Job may still run: those are handed to another Kubernetes launcher
 *   (`TakeOver`) and joined there, and retried only if none takes the Job within
 *   `recoveryWindow` or it is gone (a rolling update of rollout nodes loses no attempt);
 * - a restarted controller resumes what its predecessor left in the ledger (`queued`/`running`
 *   attempts of rollouts it recorded): an attempt a launcher adopted (a Kubernetes Job) is
 *   joined and followed to its end, never started again; any other is failed as `node-lost` and
 *   retried as a new attempt (see "Restart recovery" in README.md).
 *
 * Admission: an attempt starts only if the start budget (`setBudget`, the `SetAdmission` message:
 * rollouts started ≤ budget, retries free) and the admission hook (`setAdmission`) both allow it.
 *
 * All scheduling state lives in plain maps mutated only in synchronous sections (one JS thread),
 * so a cancel racing a placement or a retry always sees a consistent entry.
 */
import {
  AttemptCancelled,
  type AttemptFinished as AttemptFinishedT,
  AttemptFinished,
  AttemptInfraFailed,
  type AttemptOutcome,
  AttemptResult,
  ControllerError,
  type AdoptedAttempts,
  ControllerStatus,
  HarnessSpec,
  LAUNCHER_ACTOR_PREFIX,
  LauncherCapacity,
  type LaunchFinished,
  type LaunchSpec,
  RolloutEnded,
  type RewardSource,
  SubmittedGroup,
  Task
} from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Cause, Context, Deferred, Duration, Effect, ExecutionStrategy, Layer, Option, PubSub, Queue, Schedule, Schema, Scope, Stream } from "effect"
import type { AttemptEndpoints } from "../harness/env.js"
import { attemptStateOf, type FailedRewardPolicy, isRetryable, outcomeReason, rewardDecision } from "../outcome.js"
import type { TaskGroup } from "../tasks/queue.js"
import { LauncherActor } from "./launcherActor.js"
import { AttemptLedger, type AttemptLedgerService, type LedgerAttempt, type UnfinishedAttempt } from "./ledger.js"

export interface ControllerConfig {
  /** How every rollout runs (a submission may override it). */
  readonly harness: HarnessSpec
  /** The Gateway's agent-facing URLs handed to harnesses. */
  readonly endpoints: AttemptEndpoints
  /** Attempts per rollout: the first plus retries of infrastructure failures (default 3). */
  readonly maxAttempts?: number
  /** Delay before retry n is `initial * 2^(n-1)`, at most `max` (default 1 s .. 30 s). */
  readonly retryBackoff?: { readonly initial: Duration.DurationInput; readonly max: Duration.DurationInput }
  /** Reward of a harness that failed (non-zero exit, timeout): `zero` (default), `drop`, or `verifier`. */
  readonly onFailed?: FailedRewardPolicy
  /** A scheduling pass runs at least this often (default 1 s): launchers are rediscovered; membership events and attempt ends wake it sooner. */
  readonly rescanInterval?: Duration.DurationInput
  /**
   * Ended rollouts remembered for `awaitRollout` / `awaitGroup` (default 100,000); older ones are
   * forgotten, oldest first (the ledger keeps everything).
   */
  readonly retainEnded?: number
  /**
   * Recorded with every rollout this controller creates (default "reins"): a restarted controller
   * resumes only rollouts recorded with its own id (several controllers may share one store).
   */
  readonly controllerId?: string
  /**
   * After a restart, how long attempts left by the previous controller wait for a launcher to
   * adopt them before they are failed as `node-lost` and retried (default 10 s).
   */
  readonly recoveryWindow?: Duration.DurationInput
  /**
   * What closing the controller does to rollouts that have not ended: `cancel` them (default), or
   * `leave` them in the ledger for the next controller to resume (a rolling restart; Kubernetes
   * launchers with `onScopeClose: "leave"` keep their Jobs running meanwhile).
   */
  readonly onStop?: "cancel" | "leave"
  /** The initial start budget (see `setBudget`); default null = unlimited. */
  readonly budget?: number | null
}

/** What the admission hook is asked before an attempt starts. */
export interface AdmissionRequest {
  readonly rolloutId: string
  readonly attemptId: string
  /** 0 for a first attempt, n for the n-th retry. */
  readonly attemptIndex: number
  readonly groupId: string
  readonly taskId: string
}

/**
 * Says whether an attempt may start now. `false` keeps it waiting (in order, never dropped); it is
 * asked again when something changes: an attempt ends, a group is submitted, capacity appears,
 * the hook is replaced, or `reconsider` is called (and at least every `rescanInterval`). Rollouts
 * are asked oldest first; the first refusal ends the pass, so a refused rollout is never
 * overtaken. A hook that fails counts as `false`.
 */
export type AdmissionHook = (request: AdmissionRequest) => Effect.Effect<boolean>

export interface GroupSubmission {
  readonly task: Task
  readonly size: number
  /** Default: `<task id>#<n>`. Must be unused. */
  readonly groupId?: string | undefined
  readonly taskExtra?: Readonly<Record<string, unknown>> | undefined
  readonly harness?: HarnessSpec | undefined
}

export interface RolloutControllerService {
  readonly submit: (group: GroupSubmission) => Effect.Effect<SubmittedGroup, ControllerError>
  /** A group from the task queue. */
  readonly submitTaskGroup: (group: TaskGroup) => Effect.Effect<SubmittedGroup, ControllerError>
  readonly setAdmission: (hook: AdmissionHook | null) => Effect.Effect<void>
  /**
   * The start budget: at most `budget` rollouts may have been started by this controller
   * (`status.started`: first attempts placed, plus rollouts resumed after a restart); retries of
   * started rollouts never consume it. `null` = unlimited. Applies together with the hook: an
   * attempt starts only if both allow it. A rollout over budget waits, in order; retries go on.
   */
  readonly setBudget: (budget: number | null) => Effect.Effect<ControllerStatus, ControllerError>
  /** Asks the admission hook again now (e.g. after the policy version changed). */
  readonly reconsider: Effect.Effect<void>
  /** Cancels a rollout and waits until it has ended; false when it had ended already or is unknown. */
  readonly cancel: (rolloutId: string, reason: string) => Effect.Effect<boolean>
  /** Cancels every rollout that has not ended and waits for them; returns how many. */
  readonly cancelAll: (reason: string) => Effect.Effect<number>
  /** Subscribes now; the stream holds every attempt-finished event from this moment. */
  readonly subscribe: Effect.Effect<Stream.Stream<AttemptFinishedT>, never, Scope.Scope>
  /** Subscribes when run. */
  readonly events: Stream.Stream<AttemptFinishedT>
  readonly awaitRollout: (rolloutId: string) => Effect.Effect<RolloutEnded, ControllerError>
  readonly awaitGroup: (groupId: string) => Effect.Effect<ReadonlyArray<RolloutEnded>, ControllerError>
  readonly status: Effect.Effect<ControllerStatus>
}

export class RolloutController extends Context.Tag("@reins/rollout/RolloutController")<RolloutController, RolloutControllerService>() {
  /** The controller for the lifetime of the layer (needs the ledger and the node's actor system). */
  static readonly layer = (config: ControllerConfig): Layer.Layer<RolloutController, never, AttemptLedger | ActorSystem> =>
    Layer.scoped(RolloutController, makeRolloutController(config))
}

// ---------------------------------------------------------------------------------------------

interface LauncherSlot {
  readonly name: string
  readonly node: string
  readonly ref: Effect.Effect.Success<ReturnType<typeof LauncherActor.ref>>
  readonly kind: string
  max: number
  inflight: number
  /** Completed when the launcher's node goes down: its attempts are lost. */
  readonly lost: Deferred.Deferred<void>
  /** Kubernetes: what its node's shutdown does to its Jobs (see `LauncherCapacity.onStop`). */
  readonly onStop: "delete" | "leave" | undefined
  /** Its node said it leaves (a shutdown, not a crash): with `onStop: "delete"` its Jobs are being deleted. */
  leftGracefully: boolean
}

interface Entry {
  readonly rolloutId: string
  readonly groupId: string
  readonly task: Task
  readonly taskExtra: Readonly<Record<string, unknown>> | undefined
  readonly harness: HarnessSpec
  attempt: LedgerAttempt
  /**
   * `recovering`: an attempt left by a previous controller, waiting for a launcher to adopt it
   * (or for the recovery window to end).
   */
  phase: "waiting" | "placed" | "ended" | "recovering"
  /** The current attempt was resumed after a restart: it may only be joined, never started (its key is unknown). */
  resumed: boolean
  /** The launcher the attempt was handed over from (its Job may still run), while it waits for another to take it over. */
  handedFrom: string | null
  /** A TakeOver call for it is in flight. */
  offering: boolean
  /** Counts the recovery windows it entered: a deadline applies only to the window it was set for. */
  recoveries: number
  /** Counted against the start budget already (its first start; retries are free). */
  admitted: boolean
  /** Retry backoff: not placed before this time (ms). */
  notBefore: number
  slot: LauncherSlot | null
  startedAt: number | null
  cancelReason: string | null
  /** Completed to give up on a placed attempt (cancel whose launcher does not answer). */
  abort: Deferred.Deferred<void> | null
  readonly ended: Deferred.Deferred<RolloutEnded>
  /** Submission order: waiting rollouts are served oldest first (retries keep their place). */
  readonly seq: number
}

const LOST = Symbol("lost")
const ABORTED = Symbol("aborted")

const toError = (operation: string) => (e: { readonly message: string }) =>
  new ControllerError({ message: `${operation}: ${e.message}` })

/**
 * What the controller records as a rollout's task in the ledger: enough to resume the rollout
 * after a restart (the Gateway shows it as the rollout's task).
 */
const RecordedTask = Schema.Struct({
  controller: Schema.String,
  id: Schema.String,
  input: Schema.Unknown,
  extra: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  /** The submission's own harness spec (encoded), when it overrode the controller's. */
  harness: Schema.optional(HarnessSpec)
})
const encodeRecordedTask = Schema.encodeEither(RecordedTask)
const decodeRecordedTask = Schema.decodeUnknownEither(RecordedTask)

export const makeRolloutController = (config: ControllerConfig): Effect.Effect<RolloutControllerService, never, AttemptLedger | ActorSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const ledger: AttemptLedgerService = yield* AttemptLedger
    const system = yield* ActorSystem
    // The controller's fibers (one per placed attempt, discovery, retries) live in a scope of their
    // own, which closes only after the finalizer below has ended every rollout: finalizers run
    // last-added first, and an attempt's fiber must still be running to settle its rollout.
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const maxAttempts = Math.max(1, Math.floor(config.maxAttempts ?? 3))
    const backoffInitial = Duration.toMillis(config.retryBackoff?.initial ?? "1 second")
    const backoffMax = Duration.toMillis(config.retryBackoff?.max ?? "30 seconds")
    const onFailed = config.onFailed ?? "zero"
    const retainEnded = Math.max(0, Math.floor(config.retainEnded ?? 100_000))
    const controllerId = config.controllerId ?? "reins"
    const recoveryWindow = config.recoveryWindow ?? "10 seconds"

    const entries = new Map<string, Entry>()
    const groups = new Map<string, ReadonlyArray<string>>()
    const launchers = new Map<string, LauncherSlot>()
    let admission: AdmissionHook | null = null
    let admissionBlocked = false
    let budget: number | null = config.budget == null ? null : Math.max(0, Math.floor(config.budget))
    /** Rollouts counted against the budget (see `setBudget`). */
    let started = 0
    let groupCounter = 0
    let entrySeq = 0
    /** The entries in phase "waiting" (scheduling passes look at these only) and those not ended. */
    const waiting = new Set<Entry>()
    const live = new Set<Entry>()
    /** Entries in phase "recovering", by the attempt id a launcher may adopt. */
    const recovering = new Map<string, Entry>()
    /** Launchers being discovered (capacity, adoption) in the background. */
    const discovering = new Set<string>()
    /** Ended entries, oldest first, forgotten beyond `retainEnded`. */
    const endedOrder: Array<Entry> = []
    const forgetOld = () => {
      while (endedOrder.length > retainEnded) {
        const old = endedOrder.shift()!
        entries.delete(old.rolloutId)
        const ids = groups.get(old.groupId)
        if (ids !== undefined && ids.every((id) => !entries.has(id))) groups.delete(old.groupId)
      }
    }
    const setPhase = (entry: Entry, phase: Entry["phase"]) => {
      if (entry.phase === "ended") return // terminal
      if (entry.phase === "recovering") recovering.delete(entry.attempt.attemptId)
      entry.phase = phase
      if (phase === "recovering") recovering.set(entry.attempt.attemptId, entry)
      if (phase === "waiting") waiting.add(entry)
      else waiting.delete(entry)
      if (phase === "ended") {
        live.delete(entry)
        endedOrder.push(entry)
        forgetOld()
      } else live.add(entry)
    }

    const pubsub = yield* PubSub.unbounded<AttemptFinishedT>()
    const wakeQueue = yield* Queue.sliding<void>(1)
    const wake = Queue.offer(wakeQueue, undefined).pipe(Effect.asVoid)

    const logged = <A, E extends { readonly message: string }>(what: string, effect: Effect.Effect<A, E>) =>
      Effect.catchAll(effect, (e) => Effect.as(Effect.logWarning(`controller: ${what}: ${e.message}`), undefined))

    // -------------------------------------------------------------------------------- launchers

    const dropLauncher = (slot: LauncherSlot) =>
      Effect.suspend(() => {
        if (launchers.get(slot.name) === slot) launchers.delete(slot.name)
        return Deferred.succeed(slot.lost, undefined)
      })

    /**
     * A new launcher: its capacity, then what it adopted from earlier incarnations — attempts a
     * restarted controller waits for are joined there (before anything new is placed on it),
     * attempts it reports gone are failed at once, and adopted attempts nobody waits for
     * (their rollout ended or moved on to a new attempt) are cancelled.
     */
    const discover = (name: string, node: string) =>
      Effect.gen(function*() {
        const ref = yield* LauncherActor.ref(name, { node })
        const capacity = yield* ref.Capacity().pipe(Effect.timeout("3 seconds"), Effect.option)
        if (capacity._tag === "None" || launchers.has(name)) return false
        const adopted = yield* ref.Adopt().pipe(
          Effect.timeout("30 seconds"),
          Effect.tapError((e) => Effect.logWarning(`controller: launcher ${name} did not report what it adopted: ${e.message}`)),
          Effect.option
        )
        if (launchers.has(name)) return false
        const slot: LauncherSlot = {
          name,
          node,
          ref,
          kind: capacity.value.kind,
          max: capacity.value.max,
          inflight: 0,
          lost: yield* Deferred.make<void>(),
          onStop: capacity.value.onStop,
          leftGracefully: false
        }
        if (Option.isSome(adopted)) yield* reconcile(slot, adopted.value, "restart")
        launchers.set(name, slot)
        return true
      }).pipe(Effect.ensuring(Effect.sync(() => discovering.delete(name))))

    const reconcile = (slot: LauncherSlot, adopted: AdoptedAttempts, why: "restart" | "takeover") =>
      Effect.gen(function*() {
        for (const id of adopted.gone) {
          const entry = recovering.get(id)
          if (entry === undefined) continue
          yield* failRecovered(
            entry,
            why === "restart"
              ? `the controller restarted; the attempt was running when launcher node ${slot.node} restarted; its processes were killed`
              : `its launcher went away and launcher node ${slot.node} found its Job gone`
          )
        }
        const current = new Set([...live].map((e) => e.attempt.attemptId))
        for (const id of adopted.following) {
          const entry = recovering.get(id)
          if (entry !== undefined) {
            yield* place(entry, slot)
          } else if (!current.has(id)) {
            yield* Effect.logWarning(`controller: launcher ${slot.name} follows attempt ${id}, which no rollout waits for; cancelling it`)
            yield* Effect.forkIn(
              slot.ref.Cancel({ attemptId: id, reason: "orphaned: its rollout ended or moved on to a new attempt" }).pipe(Effect.timeout("60 seconds"), Effect.ignore),
              scope
            )
          }
        }
      })

    /** Brings the launcher list in line with membership: new launchers are asked their capacity, down ones are lost. */
    const refreshLaunchers = Effect.gen(function*() {
      const members = yield* system.members
      const seen = new Set<string>()
      for (const m of members) {
        if (m.status !== "up") continue
        for (const actor of m.actors) {
          if (!actor.startsWith(LAUNCHER_ACTOR_PREFIX)) continue
          seen.add(actor)
          if (!launchers.has(actor) && !discovering.has(actor)) {
            // in the background: a slow launcher (a Kubernetes listing to adopt) must not hold up
            // scheduling. A new launcher wakes the scheduler; one that does not answer is asked
            // again at the next periodic pass (waking here would spin while it stays unreachable).
            discovering.add(actor)
            yield* Effect.forkIn(Effect.flatMap(discover(actor, m.id), (added) => (added ? wake : Effect.void)), scope)
          }
        }
      }
      for (const slot of [...launchers.values()]) {
        const member = members.find((m) => m.id === slot.node)
        // a member that went down is dropped by its MemberDown event, which says whether it left
        // (a shutdown) or crashed; here only members that are gone altogether
        if (member === undefined) yield* dropLauncher(slot)
        else if (member.status !== "up") continue
        // the actor stopped on a live node: its calls fail by themselves; place nothing more there
        else if (!seen.has(slot.name)) launchers.delete(slot.name)
      }
    })

    const onMemberDown = (node: string, graceful: boolean) =>
      Effect.gen(function*() {
        for (const slot of [...launchers.values()]) {
          if (slot.node !== node) continue
          slot.leftGracefully = graceful
          yield* dropLauncher(slot)
        }
        yield* wake
      })

    // -------------------------------------------------------------------------------- endings

    const publish = (event: AttemptFinishedT) => PubSub.publish(pubsub, event)

    const endRollout = (entry: Entry, state: RolloutEnded["state"], reason: string, reward: number | null) =>
      Effect.suspend(() => {
        setPhase(entry, "ended")
        const ended = new RolloutEnded({
          rolloutId: entry.rolloutId,
          groupId: entry.groupId,
          taskId: entry.task.id,
          state,
          reason,
          attempts: entry.attempt.index + 1,
          reward
        })
        return Effect.zipRight(Deferred.succeed(entry.ended, ended), wake)
      })

    const finishedEvent = (
      entry: Entry,
      fields: {
        outcome: AttemptOutcome
        verifier: AttemptResult["verifier"]
        state: AttemptFinishedT["state"]
        reason: string
        reward: number | null
        rewardSource: RewardSource | null
        dropped: boolean
        final: boolean
      }
    ) =>
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

    /** Ends a rollout whose current attempt never reached a launcher (waiting or in backoff). */
    const cancelWaiting = (entry: Entry, why: string) =>
      Effect.gen(function*() {
        setPhase(entry, "ended") // synchronously: the scheduler skips it from now on
        const reason = `cancelled: ${why}`
        yield* logged("record cancel", ledger.finish(entry.attempt.attemptId, "cancelled", reason))
        const outcome = new AttemptCancelled({ reason: why, durationMs: 0, logs: null })
        yield* publish(
          finishedEvent(entry, { outcome, verifier: null, state: "cancelled", reason, reward: null, rewardSource: null, dropped: false, final: true })
        )
        yield* endRollout(entry, "cancelled", reason, null)
      }).pipe(Effect.uninterruptible)

    /** Ends a rollout whose attempt's handling crashed in the controller (not retried: it would crash again). */
    const failCrashed = (entry: Entry, message: string) =>
      Effect.gen(function*() {
        const reason = `controller error: ${message}`
        yield* logged("record attempt end", ledger.finish(entry.attempt.attemptId, "failed", reason))
        const outcome = new AttemptInfraFailed({ reason: "lost", retryable: false, message: reason, durationMs: 0, logs: null })
        yield* publish(
          finishedEvent(entry, { outcome, verifier: null, state: "failed", reason, reward: null, rewardSource: null, dropped: false, final: true })
        )
        yield* endRollout(entry, "failed", reason, null)
      }).pipe(Effect.uninterruptible)

    const backoffMs = (retry: number) => Math.min(backoffMax, backoffInitial * 2 ** Math.max(0, retry - 1))

    /** Records how an attempt ended, its reward, and either retries the rollout or ends it. */
    const settle = (entry: Entry, result: AttemptResult) =>
      Effect.gen(function*() {
        const outcome = result.outcome
        const attemptId = entry.attempt.attemptId
        const cancelled = entry.cancelReason !== null
        const retryable = isRetryable(outcome)
        const retry = retryable && !cancelled && entry.attempt.index + 1 < maxAttempts

        let reward: number | null = null
        let rewardSource: RewardSource | null = null
        let dropped = false
        const decision = rewardDecision(result, onFailed)
        if (decision._tag === "Reward") {
          const info = { source: decision.source, verifier: result.verifier?._tag === "VerifierReward" ? result.verifier.details : null }
          const ok = yield* Effect.either(ledger.recordReward(attemptId, decision.value, info))
          if (ok._tag === "Right") {
            reward = decision.value
            rewardSource = decision.source
          } else yield* Effect.logWarning(`controller: record reward of ${attemptId}: ${ok.left.message}`)
        } else if (decision._tag === "Drop") {
          dropped = true
        } else if (outcome._tag === "Succeeded" || outcome._tag === "Failed") {
          // the harness may have posted its own reward to /v1/reward
          reward = (yield* logged("read reward", ledger.rewardOf(entry.rolloutId, attemptId))) ?? null
          if (reward !== null) rewardSource = "harness"
        }

        const state = cancelled && outcome._tag === "InfraFailed" ? "cancelled" : attemptStateOf(outcome)
        const base = cancelled && outcome._tag === "InfraFailed" ? `cancelled: ${entry.cancelReason} (${outcomeReason(outcome)})` : outcomeReason(outcome)
        const reason = retry
          ? `${base} (retried as attempt ${entry.attempt.index + 2})`
          : retryable && !cancelled
          ? `${base} (gave up after ${entry.attempt.index + 1} attempt(s))`
          : base
        yield* logged("record attempt end", ledger.finish(attemptId, state as "succeeded" | "failed" | "cancelled", reason))

        const next = retry ? yield* Effect.either(ledger.createAttempt(entry.rolloutId)) : null
        const retried = next !== null && next._tag === "Right"
        yield* publish(
          finishedEvent(entry, { outcome, verifier: result.verifier, state: state as AttemptFinishedT["state"], reason, reward, rewardSource, dropped, final: !retried })
        )
        if (next !== null && next._tag === "Left") {
          return yield* endRollout(entry, "failed", `${reason}; the retry attempt could not be created: ${next.left.message}`, null)
        }
        if (next === null) return yield* endRollout(entry, state as RolloutEnded["state"], reason, reward)

        entry.attempt = next.right
        entry.resumed = false
        entry.handedFrom = null
        setPhase(entry, "waiting")
        entry.slot = null
        entry.startedAt = null
        entry.abort = null
        const delay = backoffMs(entry.attempt.index)
        entry.notBefore = Date.now() + delay
        if (entry.cancelReason !== null) return yield* cancelWaiting(entry, entry.cancelReason)
        yield* Effect.forkIn(Effect.zipRight(Effect.sleep(Duration.millis(delay)), wake), scope)
      }).pipe(Effect.uninterruptible)

    const infraFailure = (entry: Entry, message: string, startedAt: number | null): AttemptResult => new AttemptResult({
      rolloutId: entry.rolloutId,
      attemptId: entry.attempt.attemptId,
      outcome: new AttemptInfraFailed({
        reason: "node-lost",
        retryable: true,
        message,
        durationMs: startedAt === null ? 0 : Date.now() - startedAt,
        logs: null
      }),
      verifier: null,
      startedAt: startedAt ?? Date.now(),
      finishedAt: Date.now()
    })

    /** Fails a resumed or handed-over attempt nobody can adopt (an infrastructure failure: retried per the policy). */
    const failRecovered = (entry: Entry, message: string) =>
      Effect.suspend(() => {
        if (entry.phase !== "recovering") return Effect.void
        setPhase(entry, "placed") // taken: the recovery deadline and a launcher's report cannot both settle it
        return settle(entry, infraFailure(entry, message, null))
      })

    /** Enters "recovering" until a launcher adopts the attempt or `recoveryWindow` ends (then `failRecovered`). */
    const recoverWithin = (entry: Entry, message: string) =>
      Effect.gen(function*() {
        setPhase(entry, "recovering")
        const recovery = ++entry.recoveries
        yield* Effect.forkIn(
          Effect.sleep(recoveryWindow).pipe(
            Effect.zipRight(Effect.suspend(() => entry.recoveries === recovery ? failRecovered(entry, `${message} within ${Duration.format(Duration.decode(recoveryWindow))}`) : Effect.void))
          ),
          scope
        )
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

    /**
     * Whether the attempt's Job may run on after its launcher went away: not when the controller
     * cancelled it, nor when the launcher's node shut down with `onStop: "delete"` (it deletes its
     * Jobs: the attempt is retried, as that policy asks); a crash or `leave` keeps it running.
     */
    const mayStillRun = (entry: Entry, slot: LauncherSlot, graceful = slot.leftGracefully) =>
      slot.kind === "kubernetes" && entry.harness.kubernetes !== undefined && entry.cancelReason === null && !(graceful && slot.onStop !== "leave")

    /** Asks a Kubernetes launcher (the freest, not the lost one) to take over the handed attempts waiting for one. */
    const offerHandedOver = Effect.suspend(() => {
      const bySlot = new Map<LauncherSlot, Array<Entry>>()
      for (const entry of recovering.values()) {
        if (entry.handedFrom === null || entry.offering) continue
        let best: LauncherSlot | null = null
        for (const slot of launchers.values()) {
          if (slot.kind !== "kubernetes" || slot.name === entry.handedFrom) continue
          if (best === null || slot.max - slot.inflight > best.max - best.inflight) best = slot
        }
        if (best === null) continue
        entry.offering = true
        bySlot.set(best, [...(bySlot.get(best) ?? []), entry])
      }
      return Effect.forEach(
        [...bySlot],
        ([slot, handed]) =>
          slot.ref.TakeOver({ attempts: handed.map((e) => ({ attemptId: e.attempt.attemptId, namespace: e.harness.kubernetes!.namespace })) }).pipe(
            Effect.timeout("30 seconds"),
            Effect.flatMap((taken) => reconcile(slot, taken, "takeover")),
            Effect.catchAll((e) => Effect.logWarning(`controller: launcher ${slot.name} did not take over handed attempts: ${e.message}`)),
            Effect.ensuring(Effect.sync(() => handed.forEach((e) => void (e.offering = false)))),
            Effect.forkIn(scope)
          ),
        { discard: true }
      )
    })

    // -------------------------------------------------------------------------------- running

    const specOf = (entry: Entry): LaunchSpec => ({
      rolloutId: entry.rolloutId,
      attemptId: entry.attempt.attemptId,
      attemptKey: entry.attempt.key,
      task: entry.task,
      ...(entry.taskExtra === undefined ? {} : { taskExtra: entry.taskExtra }),
      harness: entry.harness,
      endpoints: config.endpoints,
      ...(entry.resumed ? { adoptOnly: true } : {})
    })

    /** Runs the entry's attempt on `slot` until it ends, then settles it. */
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
        const ended = yield* Effect.raceAll([
          consume,
          Effect.as(Deferred.await(slot.lost), LOST),
          Effect.as(Deferred.await(abort), ABORTED)
        ])
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
          const outcome = new AttemptCancelled({ reason: entry.cancelReason ?? "aborted", durationMs: 0, logs: null })
          const at = entry.startedAt ?? Date.now()
          return yield* settle(entry, new AttemptResult({ rolloutId: entry.rolloutId, attemptId: entry.attempt.attemptId, outcome, verifier: null, startedAt: at, finishedAt: Date.now() }))
        }
        if (ended === LOST) {
          if (mayStillRun(entry, slot)) return yield* handOver(entry, slot, `launcher node ${slot.node} went down`)
          return yield* settle(entry, infraFailure(entry, `launcher node ${slot.node} went down`, entry.startedAt))
        }
        const either = ended as Exclude<typeof ended, typeof LOST | typeof ABORTED>
        if (either._tag === "Left") {
          const e = either.left
          if (e._tag === "LauncherFull" && entry.startedAt === null) {
            // nothing started: the same attempt waits for another place (briefly, so that a
            // launcher filled by someone else is not asked again in a tight loop)
            slot.max = Math.min(slot.max, e.max)
            setPhase(entry, "waiting")
            entry.slot = null
            entry.notBefore = Date.now() + 500
            if (entry.cancelReason !== null) return yield* cancelWaiting(entry, entry.cancelReason)
            return
          }
          // the call broke (node gone, connection lost): place nothing more there until it is
          // rediscovered, and make sure nothing keeps running there
          const broke = e._tag === "ActorUnavailable" || e._tag === "ActorNotFound"
          if (broke && launchers.get(slot.name) === slot) launchers.delete(slot.name)
          // its Job may run on: another launcher takes it over (a cancel would delete it)
          if (broke && mayStillRun(entry, slot, slot.leftGracefully || (e._tag === "ActorUnavailable" && e.reason === "shutting-down"))) return yield* handOver(entry, slot, `the launch on ${slot.node} broke (${e.message})`)
          yield* Effect.forkIn(
            slot.ref.Cancel({ attemptId: entry.attempt.attemptId, reason: "launch call lost" }).pipe(Effect.timeout("5 seconds"), Effect.ignore),
            scope
          )
          return yield* settle(entry, infraFailure(entry, `launch on ${slot.node} failed: ${e.message}`, entry.startedAt))
        }
        if (mayStillRun(entry, slot)) return yield* handOver(entry, slot, `launcher on ${slot.node} ended the launch without a result`)
        return yield* settle(entry, infraFailure(entry, `launcher on ${slot.node} ended the launch without a result`, entry.startedAt))
      })

    const place = (entry: Entry, slot: LauncherSlot) =>
      Effect.gen(function*() {
        const abort = yield* Deferred.make<void>()
        setPhase(entry, "placed")
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

    // -------------------------------------------------------------------------------- scheduling

    const freest = (): LauncherSlot | null => {
      let best: LauncherSlot | null = null
      for (const slot of launchers.values()) {
        const free = slot.max - slot.inflight
        if (free > 0 && (best === null || free > best.max - best.inflight)) best = slot
      }
      return best
    }

    const admit = (entry: Entry) =>
      admission === null
        ? Effect.succeed(true)
        : admission({
          rolloutId: entry.rolloutId,
          attemptId: entry.attempt.attemptId,
          attemptIndex: entry.attempt.index,
          groupId: entry.groupId,
          taskId: entry.task.id
        }).pipe(
          Effect.catchAllCause((cause) => Effect.as(Effect.logWarning("controller: the admission hook failed (counted as no)", cause), false))
        )

    const overBudget = (entry: Entry) => !entry.admitted && budget !== null && started >= budget

    const pass = Effect.gen(function*() {
      yield* refreshLaunchers
      yield* offerHandedOver
      admissionBlocked = false
      const now = Date.now()
      for (const entry of [...waiting].sort((x, y) => x.seq - y.seq)) {
        if (entry.phase !== "waiting" || entry.notBefore > now) continue
        // over budget: no new rollout starts (so none overtakes this one), retries still do
        if (overBudget(entry)) {
          admissionBlocked = true
          continue
        }
        const slot = freest()
        if (slot === null) return
        const ok = yield* admit(entry)
        if (entry.phase !== "waiting") continue // cancelled while the hook was deciding
        if (!ok) {
          admissionBlocked = true
          return
        }
        if (slot.max - slot.inflight <= 0 || launchers.get(slot.name) !== slot || overBudget(entry)) continue
        if (!entry.admitted) {
          entry.admitted = true
          started++
        }
        yield* place(entry, slot)
      }
    })

    yield* Effect.forever(Effect.zipRight(Queue.take(wakeQueue), pass)).pipe(
      Effect.catchAllCause((cause) => Effect.logError("controller: scheduler crashed", cause)),
      Effect.forkIn(scope)
    )
    // a periodic pass also (re)discovers launchers whose first capacity query failed (a
    // connection still opening), so they are known before anything waits for them
    yield* Effect.forkIn(Effect.repeat(wake, Schedule.spaced(config.rescanInterval ?? "1 second")), scope)
    yield* Effect.forkIn(
      Stream.runForEach(system.events, (event) => (event._tag === "MemberDown" ? onMemberDown(event.member.id, event.reason === "left") : wake)),
      scope
    )

    // -------------------------------------------------------------------------------- API

    const register = (
      s: Pick<GroupSubmission, "task" | "taskExtra" | "harness">,
      groupId: string,
      created: LedgerAttempt,
      phase: "waiting" | "recovering" = "waiting"
    ) =>
      Effect.map(Deferred.make<RolloutEnded>(), (ended) => {
        const entry: Entry = {
          rolloutId: created.rolloutId,
          groupId,
          task: s.task,
          taskExtra: s.taskExtra,
          harness: s.harness ?? config.harness,
          attempt: created,
          phase,
          resumed: phase === "recovering",
          handedFrom: null,
          offering: false,
          recoveries: 0,
          admitted: phase === "recovering",
          notBefore: 0,
          slot: null,
          startedAt: null,
          cancelReason: null,
          abort: null,
          ended,
          seq: entrySeq++
        }
        entries.set(entry.rolloutId, entry)
        setPhase(entry, phase)
        return entry
      })

    /** The task as recorded in the ledger (see `RecordedTask`). */
    const recordTask = (s: GroupSubmission) =>
      encodeRecordedTask({
        controller: controllerId,
        id: s.task.id,
        input: s.task.input ?? null,
        ...(s.taskExtra === undefined ? {} : { extra: s.taskExtra }),
        ...(s.harness === undefined ? {} : { harness: s.harness })
      })

    const nextGroupId = (taskId: string) => {
      for (;;) {
        const id = `${taskId}#${groupCounter++}`
        if (!groups.has(id)) return id
      }
    }

    const submit = (s: GroupSubmission) =>
      Effect.gen(function*() {
        if (!Number.isInteger(s.size) || s.size < 1) return yield* new ControllerError({ message: `group size must be a positive integer, got ${s.size}` })
        const groupId = s.groupId ?? nextGroupId(s.task.id)
        if (groups.has(groupId)) return yield* new ControllerError({ message: `group ${groupId} was already submitted` })
        const recorded = yield* recordTask(s).pipe(
          Effect.mapError((e) => new ControllerError({ message: `group ${groupId}: the task cannot be recorded: ${e.message}` }))
        )
        groups.set(groupId, [])
        const created: Array<Entry> = []
        for (let i = 0; i < s.size; i++) {
          const issued = yield* ledger.createRollout({ task: recorded, group: groupId }).pipe(
            Effect.tapError(() => Effect.forEach(created, (e) => cancelWaiting(e, "the rest of its group could not be created"), { discard: true })),
            Effect.mapError(toError(`submit group ${groupId}`))
          )
          created.push(yield* register(s, groupId, issued))
          groups.set(groupId, created.map((e) => e.rolloutId))
        }
        yield* wake
        return new SubmittedGroup({ groupId, rolloutIds: created.map((e) => e.rolloutId) })
      })

    const cancel = (rolloutId: string, reason: string): Effect.Effect<boolean> =>
      Effect.gen(function*() {
        const entry = entries.get(rolloutId)
        if (entry === undefined || entry.phase === "ended") return false
        if (entry.cancelReason === null) {
          entry.cancelReason = reason
          if (entry.phase === "waiting" || entry.phase === "recovering") {
            yield* cancelWaiting(entry, reason)
          } else if (entry.slot !== null && entry.abort !== null) {
            const slot = entry.slot
            const abort = entry.abort
            const asked = yield* slot.ref.Cancel({ attemptId: entry.attempt.attemptId, reason }).pipe(
              Effect.timeout(Duration.seconds(entry.harness.grace_s + 10)),
              Effect.orElseSucceed(() => false)
            )
            // not running there (yet) or unreachable: stop waiting for it (interrupting the call stops it there)
            if (!asked) yield* Deferred.succeed(abort, undefined)
          }
        }
        yield* Deferred.await(entry.ended)
        return true
      })

    const cancelAll = (reason: string) =>
      Effect.map(
        Effect.forEach([...live], (e) => cancel(e.rolloutId, reason), { concurrency: "unbounded" }),
        (done) => done.filter(Boolean).length
      )

    const awaitRollout = (rolloutId: string) =>
      Effect.suspend(() => {
        const entry = entries.get(rolloutId)
        return entry === undefined
          ? Effect.fail(new ControllerError({ message: `unknown rollout ${rolloutId} (or ended long ago and forgotten)` }))
          : Deferred.await(entry.ended)
      })

    const awaitGroup = (groupId: string) =>
      Effect.suspend(() => {
        const ids = groups.get(groupId)
        return ids === undefined
          ? Effect.fail(new ControllerError({ message: `unknown group ${groupId} (or ended long ago and forgotten)` }))
          : Effect.forEach(ids, awaitRollout, { concurrency: "unbounded" })
      })

    const subscribe = Effect.map(PubSub.subscribe(pubsub), (queue) => Stream.fromQueue(queue))

    const status = Effect.sync(() => {
      return new ControllerStatus({
        waiting: waiting.size,
        running: live.size - waiting.size - recovering.size,
        ended: entries.size - live.size,
        admissionBlocked,
        started,
        budget,
        recovering: recovering.size,
        launchers: [...launchers.values()].map((s) => new LauncherCapacity({ node: s.node, kind: s.kind, max: s.max, running: s.inflight }))
      })
    })

    const setBudget = (value: number | null) =>
      Effect.suspend(() => {
        if (value !== null && !(Number.isInteger(value) && value >= 0)) {
          return Effect.fail(new ControllerError({ message: `the start budget must be a non-negative integer or null, got ${value}` }))
        }
        budget = value
        return Effect.zipRight(wake, status)
      })

    // -------------------------------------------------------------------------------- restart recovery

    /** A rollout the previous controller left unfinished, as this controller's entry (null: not ours). */
    const resume = (u: UnfinishedAttempt) =>
      Effect.gen(function*() {
        const recorded = decodeRecordedTask(u.task)
        if (recorded._tag === "Left") {
          const owner = typeof u.task === "object" && u.task !== null ? (u.task as { controller?: unknown }).controller : undefined
          if (owner === controllerId) yield* Effect.logWarning(`controller: rollout ${u.rolloutId} cannot be resumed, its recorded task is unreadable: ${recorded.left.message}`)
          return null
        }
        if (recorded.right.controller !== controllerId) return null
        const r = recorded.right
        const groupId = u.group ?? `${r.id}#resumed-${u.rolloutId}`
        const entry = yield* register(
          { task: new Task({ id: r.id, input: r.input }), taskExtra: r.extra, harness: r.harness },
          groupId,
          { rolloutId: u.rolloutId, attemptId: u.attemptId, index: u.index, key: "" },
          "recovering"
        )
        groups.set(groupId, [...(groups.get(groupId) ?? []), entry.rolloutId])
        started++ // it was started (admitted) by the previous controller
        return entry
      })

    /**
     * Resumes what the previous controller left: every unfinished rollout it recorded waits
     * (phase "recovering") for a launcher to report it adopted the attempt; at the end of the
     * recovery window the rest are failed as `node-lost` and retried as new attempts.
     */
    const recover = Effect.gen(function*() {
      const left = yield* ledger.unfinished.pipe(
        Effect.retry(Schedule.exponential("200 millis").pipe(Schedule.intersect(Schedule.recurs(4)))),
        Effect.catchAll((e) =>
          Effect.as(Effect.logError(`controller: cannot read unfinished attempts from the ledger (they stay as they are): ${e.message}`), [])
        )
      )
      let resumed = 0
      for (const u of left) if ((yield* resume(u)) !== null) resumed++
      if (resumed === 0) return
      yield* Effect.logInfo(`controller: resuming ${resumed} rollout(s) left unfinished by a previous controller`)
      yield* Effect.forkIn(
        Effect.sleep(recoveryWindow).pipe(
          Effect.zipRight(Effect.suspend(() =>
            Effect.forEach(
              // (an entry that recovers again since, handed over from a lost launcher, has its own deadline)
              [...recovering.values()].filter((entry) => entry.recoveries === 0),
              (entry) => failRecovered(entry, `the controller restarted; no launcher adopted the attempt within ${Duration.format(Duration.decode(recoveryWindow))}`),
              { discard: true }
            )
          ))
        ),
        scope
      )
    })
    yield* recover

    // closing the controller ends every rollout it still holds (bounded: launchers may be gone),
    // unless they are left for the next controller to resume
    if (config.onStop !== "leave") {
      // (interruptible, or the timeout could not cut it short: finalizers run uninterruptibly)
      yield* Effect.addFinalizer(() => cancelAll("controller stopped").pipe(Effect.interruptible, Effect.timeout("15 seconds"), Effect.ignore))
    }

    yield* wake
    return {
      submit,
      submitTaskGroup: (g: TaskGroup) =>
        submit({ task: g.record.task, size: g.size, groupId: g.groupId, taskExtra: g.record.extra }),
      setAdmission: (hook: AdmissionHook | null) => Effect.zipRight(Effect.sync(() => void (admission = hook)), wake),
      setBudget,
      reconsider: wake,
      cancel,
      cancelAll,
      subscribe,
      events: Stream.unwrapScoped(subscribe),
      awaitRollout,
      awaitGroup,
      status
    } satisfies RolloutControllerService
  })
