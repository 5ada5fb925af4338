/**
 * Where the Rollout Controller meets the Gateway: the controller records attempts through an
 * `AttemptLedger`, and in a deployment that ledger is the Gateway's store (the two packages never
 * import each other; this package wires them).
 */
import { Store, type StoreService } from "@reins/gateway"
import type { Rollout } from "@reins/protocol"
import { AttemptLedger, type AttemptLedgerService, LedgerError, type UnfinishedAttempt } from "@reins/rollout/controller"
import { Effect, Layer } from "effect"

const ledgerError = (operation: string) => (e: { readonly message: string }) => new LedgerError({ operation, message: e.message })

const issued = (i: { readonly rollout: { readonly id: string }; readonly attempt: { readonly id: string; readonly index: number }; readonly key: string }) => ({
  rolloutId: i.rollout.id,
  attemptId: i.attempt.id,
  index: i.attempt.index,
  key: i.key
})

/** Every rollout of the store in `state`, oldest first (the store pages newest first). */
const rolloutsIn = (store: StoreService, state: "queued" | "running") =>
  Effect.gen(function*() {
    const all: Array<Rollout> = []
    let cursor: string | undefined
    for (;;) {
      const page = yield* store.rollouts({ state, limit: 500, cursor })
      all.push(...page.rollouts)
      if (page.next === null) return all.reverse()
      cursor = page.next
    }
  })

/** Rollouts whose latest attempt has not ended, with that attempt (read at a controller's start). */
const unfinished = (store: StoreService) =>
  Effect.gen(function*() {
    const rollouts = [...(yield* rolloutsIn(store, "queued")), ...(yield* rolloutsIn(store, "running"))]
    rollouts.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    const out: Array<UnfinishedAttempt> = []
    for (const r of rollouts) {
      const latest = (yield* store.rollout(r.id)).attempts.at(-1)
      if (latest === undefined || (latest.state !== "queued" && latest.state !== "running")) continue // ended meanwhile
      out.push({ rolloutId: r.id, attemptId: latest.id, index: latest.index, state: latest.state, task: r.task, group: r.group })
    }
    return out
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
  rewardOf: (rolloutId, attemptId) =>
    store.rollout(rolloutId).pipe(
      Effect.map((d) => d.rewards.filter((r) => r.attemptId === attemptId && r.callId === null).at(-1)?.value ?? null),
      Effect.mapError(ledgerError("rewardOf"))
    ),
  unfinished: unfinished(store).pipe(Effect.mapError(ledgerError("unfinished")))
})

/** `AttemptLedger` from the Gateway's `Store` in the same process. */
export const storeLedgerLayer = Layer.effect(AttemptLedger, Effect.map(Store, storeLedger))
