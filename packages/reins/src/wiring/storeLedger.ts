/**
 * Where the Rollout Controller meets the Gateway: the controller records attempts through an
 * `AttemptLedger`, and in a deployment that ledger is the Gateway's store (the two packages never
 * import each other; this package wires them).
 */
import { Store, type StoreService } from "@reins/gateway"
import { AttemptLedger, type AttemptLedgerService, LedgerError, type UnfinishedAttempt } from "@reins/rollout/controller"
import { Effect, Layer } from "effect"

const ledgerError = (operation: string) => (e: { readonly message: string }) => new LedgerError({ operation, message: e.message })

const issued = (i: { readonly rollout: { readonly id: string }; readonly attempt: { readonly id: string; readonly index: number }; readonly key: string }) => ({
  rolloutId: i.rollout.id,
  attemptId: i.attempt.id,
  index: i.attempt.index,
  key: i.key
})

/** The Gateway's store as the controller's ledger: attempts, keys, state changes and rewards. */
export const storeLedger = (store: StoreService): AttemptLedgerService => ({
  createRollout: ({ task, group }) => store.createRollout({ task, group }).pipe(Effect.map(issued), Effect.mapError(ledgerError("createRollout"))),
  createAttempt: (rolloutId) => store.createAttempt(rolloutId).pipe(Effect.map(issued), Effect.mapError(ledgerError("createAttempt"))),
  start: (attemptId) =>
    store.transition(attemptId, "running").pipe(
      Effect.asVoid,
      // the Gateway starts a queued attempt on its first call
      Effect.catchTag("IllegalTransition", (e) => (e.from === "running" ? Effect.void : Effect.fail(e))),
      Effect.mapError(ledgerError("start"))
    ),
  finish: (attemptId, state, reason) =>
    store.transition(attemptId, state, reason).pipe(
      Effect.catchTag("IllegalTransition", (e) =>
        e.from === "queued"
          ? Effect.asVoid(Effect.zipRight(store.transition(attemptId, "running"), store.transition(attemptId, state, reason)))
          : Effect.void // already ended: leave it
      ),
      Effect.asVoid,
      Effect.mapError(ledgerError("finish"))
    ),
  recordReward: (attemptId, value, info) => store.addReward({ attemptId, value, info }).pipe(Effect.asVoid, Effect.mapError(ledgerError("recordReward"))),
  rewardOf: (rolloutId, attemptId) => store.finalReward(rolloutId, attemptId).pipe(Effect.mapError(ledgerError("rewardOf"))),
  unfinished: store.unfinished.pipe(
    Effect.map((left) =>
      left.map(({ attempt, group, task }): UnfinishedAttempt => ({
        rolloutId: attempt.rolloutId,
        attemptId: attempt.id,
        index: attempt.index,
        state: attempt.state as UnfinishedAttempt["state"],
        task,
        group
      }))
    ),
    Effect.mapError(ledgerError("unfinished"))
  )
})

/** `AttemptLedger` from the Gateway's `Store` in the same process. */
export const storeLedgerLayer = Layer.effect(AttemptLedger, Effect.map(Store, storeLedger))
