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
 * The parts: the entry table (`entries.ts`), the launcher pool (`launcherPool.ts`), an attempt's
 * placement and settlement (`attempts.ts`, deciding with `settle.ts`) and recovery (`recovery.ts`);
 * this file holds the scheduling pass, admission and the service's API over them.
 */
import { type AttemptFinished, ControllerError, ControllerStatus, type HarnessSpec, type RolloutEnded, SubmittedGroup, type Task } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Context, Deferred, Duration, Effect, ExecutionStrategy, Layer, PubSub, Queue, Schedule, Scope, Stream } from "effect"
import { makeAttempts } from "./attempts.js"
import { type ControllerConfig, type ControllerContext, settingsOf } from "./context.js"
import { type Entry, EntryTable } from "./entries.js"
import { makeLauncherPool } from "./launcherPool.js"
import { AttemptLedger } from "./ledger.js"
import { encodeRecordedTask, makeRecovery } from "./recovery.js"

export type { ControllerConfig } from "./context.js"

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
  readonly subscribe: Effect.Effect<Stream.Stream<AttemptFinished>, never, Scope.Scope>
  /** Subscribes when run. */
  readonly events: Stream.Stream<AttemptFinished>
  readonly awaitRollout: (rolloutId: string) => Effect.Effect<RolloutEnded, ControllerError>
  readonly awaitGroup: (groupId: string) => Effect.Effect<ReadonlyArray<RolloutEnded>, ControllerError>
  readonly status: Effect.Effect<ControllerStatus>
}

export class RolloutController extends Context.Tag("@reins/rollout/RolloutController")<RolloutController, RolloutControllerService>() {
  /** The controller for the lifetime of the layer (needs the ledger and the node's actor system). */
  static readonly layer = (config: ControllerConfig): Layer.Layer<RolloutController, never, AttemptLedger | ActorSystem> =>
    Layer.scoped(RolloutController, makeRolloutController(config))
}

export const makeRolloutController = (config: ControllerConfig): Effect.Effect<RolloutControllerService, never, AttemptLedger | ActorSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const ledger = yield* AttemptLedger
    const system = yield* ActorSystem
    // The controller's fibers (one per placed attempt, discovery, retries) live in a scope of their
    // own, which closes only after the finalizer below has ended every rollout: finalizers run
    // last-added first, and an attempt's fiber must still be running to settle its rollout.
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const settings = settingsOf(config)
    const wakeQueue = yield* Queue.sliding<void>(1)
    const wake = Queue.offer(wakeQueue, undefined).pipe(Effect.asVoid)
    const table = new EntryTable(settings.retainEnded)
    const pool = yield* makeLauncherPool(scope, wake)
    const ctx: ControllerContext = { settings, ledger, table, pool, scope, wake, finished: yield* PubSub.unbounded<AttemptFinished>() }
    const attempts = makeAttempts(ctx)
    const recovery = makeRecovery(ctx, attempts)

    let admission: AdmissionHook | null = null
    let admissionBlocked = false
    let budget: number | null = config.budget == null ? null : Math.max(0, Math.floor(config.budget))
    /** Rollouts counted against the budget (see `setBudget`). */
    let started = 0

    // -------------------------------------------------------------------------------- scheduling

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
    const hasRoom = (slot: { readonly max: number; readonly inflight: number }) => slot.max - slot.inflight > 0

    const pass = Effect.gen(function*() {
      yield* pool.refresh((slot, adopted) => recovery.reconcile(slot, adopted, "restart"))
      yield* recovery.offerHandedOver
      admissionBlocked = false
      const now = Date.now()
      for (const entry of table.waitingInOrder()) {
        if (entry.phase !== "waiting" || entry.notBefore > now) continue
        // over budget: no new rollout starts (so none overtakes this one), retries still do
        if (overBudget(entry)) {
          admissionBlocked = true
          continue
        }
        const slot = pool.freest(hasRoom)
        if (slot === null) return
        const ok = yield* admit(entry)
        if (entry.phase !== "waiting") continue // cancelled while the hook was deciding
        if (!ok) {
          admissionBlocked = true
          return
        }
        if (!hasRoom(slot) || !pool.holds(slot) || overBudget(entry)) continue
        if (!entry.admitted) {
          entry.admitted = true
          started++
        }
        yield* attempts.place(entry, slot)
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
      Stream.runForEach(system.events, (event) =>
        event._tag === "MemberDown" ? Effect.zipRight(pool.memberDown(event.member.id, event.reason === "left"), wake) : wake),
      scope
    )

    // -------------------------------------------------------------------------------- API

    const submit = (s: GroupSubmission) =>
      Effect.gen(function*() {
        if (!Number.isInteger(s.size) || s.size < 1) return yield* new ControllerError({ message: `group size must be a positive integer, got ${s.size}` })
        const groupId = s.groupId ?? table.nextGroupId(s.task.id)
        if (table.groups.has(groupId)) return yield* new ControllerError({ message: `group ${groupId} was already submitted` })
        const recorded = yield* encodeRecordedTask({
          controller: settings.controllerId,
          id: s.task.id,
          input: s.task.input ?? null,
          ...(s.taskExtra === undefined ? {} : { extra: s.taskExtra }),
          ...(s.harness === undefined ? {} : { harness: s.harness })
        }).pipe(Effect.mapError((e) => new ControllerError({ message: `group ${groupId}: the task cannot be recorded: ${e.message}` })))
        table.groups.set(groupId, [])
        const created: Array<Entry> = []
        for (let i = 0; i < s.size; i++) {
          const attempt = yield* ledger.createRollout({ task: recorded, group: groupId }).pipe(
            Effect.tapError(() => Effect.forEach(created, (e) => attempts.cancelWaiting(e, "the rest of its group could not be created"), { discard: true })),
            Effect.mapError((e) => new ControllerError({ message: `submit group ${groupId}: ${e.message}` }))
          )
          const ended = yield* Deferred.make<RolloutEnded>()
          const entry = table.add({ rolloutId: attempt.rolloutId, groupId, task: s.task, taskExtra: s.taskExtra, harness: s.harness ?? settings.harness, attempt, ended }, "waiting")
          created.push(entry)
          table.joinGroup(groupId, entry.rolloutId)
        }
        yield* wake
        return new SubmittedGroup({ groupId, rolloutIds: created.map((e) => e.rolloutId) })
      })

    const cancel = (rolloutId: string, reason: string): Effect.Effect<boolean> =>
      Effect.gen(function*() {
        const entry = table.byId.get(rolloutId)
        if (entry === undefined || entry.phase === "ended") return false
        if (entry.cancelReason === null) {
          entry.cancelReason = reason
          if (entry.phase === "waiting" || entry.phase === "recovering") {
            yield* attempts.cancelWaiting(entry, reason)
          } else if (entry.slot !== null && entry.abort !== null) {
            const abort = entry.abort
            const asked = yield* entry.slot.ref.Cancel({ attemptId: entry.attempt.attemptId, reason }).pipe(
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
        Effect.forEach([...table.live], (e) => cancel(e.rolloutId, reason), { concurrency: "unbounded" }),
        (done) => done.filter(Boolean).length
      )

    const awaitRollout = (rolloutId: string) =>
      Effect.suspend(() => {
        const entry = table.byId.get(rolloutId)
        return entry === undefined
          ? Effect.fail(new ControllerError({ message: `unknown rollout ${rolloutId} (or ended long ago and forgotten)` }))
          : Deferred.await(entry.ended)
      })

    const awaitGroup = (groupId: string) =>
      Effect.suspend(() => {
        const ids = table.groups.get(groupId)
        return ids === undefined
          ? Effect.fail(new ControllerError({ message: `unknown group ${groupId} (or ended long ago and forgotten)` }))
          : Effect.forEach(ids, awaitRollout, { concurrency: "unbounded" })
      })

    const subscribe = Effect.map(PubSub.subscribe(ctx.finished), (queue) => Stream.fromQueue(queue))

    const status = Effect.sync(() =>
      new ControllerStatus({
        waiting: table.waiting.size,
        running: table.live.size - table.waiting.size - table.recovering.size,
        ended: table.byId.size - table.live.size,
        admissionBlocked,
        started,
        budget,
        recovering: table.recovering.size,
        launchers: pool.capacities()
      })
    )

    const setBudget = (value: number | null) =>
      Effect.suspend(() => {
        if (value !== null && !(Number.isInteger(value) && value >= 0)) {
          return Effect.fail(new ControllerError({ message: `the start budget must be a non-negative integer or null, got ${value}` }))
        }
        budget = value
        return Effect.zipRight(wake, status)
      })

    // rollouts resumed from a previous controller were started (admitted) by it
    started += yield* recovery.recover

    // closing the controller ends every rollout it still holds (bounded: launchers may be gone),
    // unless they are left for the next controller to resume
    if (config.onStop !== "leave") {
      // (interruptible, or the timeout could not cut it short: finalizers run uninterruptibly)
      yield* Effect.addFinalizer(() => cancelAll("controller stopped").pipe(Effect.interruptible, Effect.timeout("15 seconds"), Effect.ignore))
    }

    yield* wake
    return {
      submit,
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
