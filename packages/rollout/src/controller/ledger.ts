/**
 * `AttemptLedger`: where the controller records rollouts, attempts, their states and rewards.
 * In a deployment it is the Gateway's store (the `reins` package wires it: the rollout package
 * never imports the Gateway); the attempt keys it issues are what the Gateway authenticates
 * harness calls with. `AttemptLedger.memory` keeps everything in this process (benchmarks,
 * scripts without a Gateway).
 *
 * `start` and `finish` are idempotent: the Gateway starts a queued attempt itself on its first
 * model call, so the controller's own `start` may find it running already.
 *
 * `unfinished` is what a restarted controller reconciles: rollouts whose latest attempt is still
 * `queued` or `running`, with the task they were created with (the controller recognises its
 * own by what it recorded there).
 */
import type { AttemptState } from "@reins/protocol"
import { Context, Data, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"

/** An attempt issued by the ledger: its ids and the key the harness calls the Gateway with. */
export interface LedgerAttempt {
  readonly rolloutId: string
  readonly attemptId: string
  /** 0 for the first attempt of a rollout, 1 for its first retry, ... */
  readonly index: number
  readonly key: string
}

/** A rollout whose latest attempt has not ended. */
export interface UnfinishedAttempt {
  readonly rolloutId: string
  readonly attemptId: string
  readonly index: number
  readonly state: "queued" | "running"
  /** What `createRollout` was given. */
  readonly task: unknown
  readonly group: string | null
}

export class LedgerError extends Data.TaggedError("LedgerError")<{ readonly operation: string; readonly message: string }> {}

export interface AttemptLedgerService {
  /** A new rollout and its first attempt (`queued`). */
  readonly createRollout: (input: { readonly task: unknown; readonly group: string }) => Effect.Effect<LedgerAttempt, LedgerError>
  /** A retry: a new `queued` attempt of a rollout whose latest attempt has ended. */
  readonly createAttempt: (rolloutId: string) => Effect.Effect<LedgerAttempt, LedgerError>
  /** `queued → running`; already running is fine. */
  readonly start: (attemptId: string) => Effect.Effect<void, LedgerError>
  /** Ends the attempt with `state` and `reason`; an attempt that has already ended is left as it is. */
  readonly finish: (attemptId: string, state: "succeeded" | "failed" | "cancelled", reason: string) => Effect.Effect<void, LedgerError>
  readonly recordReward: (attemptId: string, value: number, info: unknown) => Effect.Effect<void, LedgerError>
  /** The last final reward recorded for the attempt (e.g. posted by the harness to `/v1/reward`), if any. */
  readonly rewardOf: (rolloutId: string, attemptId: string) => Effect.Effect<number | null, LedgerError>
  /** Every rollout whose latest attempt is `queued` or `running`, oldest first. */
  readonly unfinished: Effect.Effect<ReadonlyArray<UnfinishedAttempt>, LedgerError>
}

export class AttemptLedger extends Context.Tag("@reins/rollout/AttemptLedger")<AttemptLedger, AttemptLedgerService>() {
  /** A ledger in this process's memory. */
  static readonly memory = (): Layer.Layer<AttemptLedger> => Layer.sync(AttemptLedger, makeMemoryLedger)
}

interface MemoryAttempt {
  readonly rolloutId: string
  state: AttemptState
  reason: string | null
  reward: number | null
}

/** An in-memory ledger with the store's rules (one live attempt per rollout, terminal states are final). */
export const makeMemoryLedger = (): AttemptLedgerService & {
  readonly attempts: ReadonlyMap<string, { readonly rolloutId: string; readonly state: AttemptState; readonly reason: string | null; readonly reward: number | null }>
} => {
  const attempts = new Map<string, MemoryAttempt>()
  const rollouts = new Map<string, Array<string>>()
  const created = new Map<string, { readonly task: unknown; readonly group: string }>()
  const newId = (prefix: string) => `${prefix}_${randomBytes(8).toString("hex")}`
  const issue = (rolloutId: string): LedgerAttempt => {
    const list = rollouts.get(rolloutId)!
    const attemptId = newId("at")
    list.push(attemptId)
    attempts.set(attemptId, { rolloutId, state: "queued", reason: null, reward: null })
    return { rolloutId, attemptId, index: list.length - 1, key: newId("key") }
  }
  const get = (operation: string, attemptId: string) =>
    Effect.suspend(() => {
      const a = attempts.get(attemptId)
      return a === undefined ? Effect.fail(new LedgerError({ operation, message: `attempt ${attemptId} not found` })) : Effect.succeed(a)
    })
  const ended = (s: AttemptState) => s !== "queued" && s !== "running"
  return {
    attempts,
    createRollout: ({ group, task }) =>
      Effect.sync(() => {
        const rolloutId = newId("ro")
        rollouts.set(rolloutId, [])
        created.set(rolloutId, { task, group })
        return issue(rolloutId)
      }),
    createAttempt: (rolloutId) =>
      Effect.suspend(() => {
        const list = rollouts.get(rolloutId)
        if (list === undefined) return Effect.fail(new LedgerError({ operation: "createAttempt", message: `rollout ${rolloutId} not found` }))
        const live = list.find((id) => !ended(attempts.get(id)!.state))
        if (live !== undefined) return Effect.fail(new LedgerError({ operation: "createAttempt", message: `rollout ${rolloutId} still has a live attempt (${live})` }))
        return Effect.succeed(issue(rolloutId))
      }),
    start: (attemptId) => Effect.map(get("start", attemptId), (a) => void (a.state === "queued" && (a.state = "running"))),
    finish: (attemptId, state, reason) =>
      Effect.map(get("finish", attemptId), (a) => {
        if (ended(a.state)) return
        a.state = state
        a.reason = reason
      }),
    recordReward: (attemptId, value) => Effect.map(get("recordReward", attemptId), (a) => void (a.reward = value)),
    rewardOf: (_rolloutId, attemptId) => Effect.map(get("rewardOf", attemptId), (a) => a.reward),
    unfinished: Effect.sync(() => {
      const out: Array<UnfinishedAttempt> = []
      for (const [rolloutId, list] of rollouts) {
        const attemptId = list.at(-1)!
        const state = attempts.get(attemptId)!.state
        if (state !== "queued" && state !== "running") continue
        const { group, task } = created.get(rolloutId)!
        out.push({ rolloutId, attemptId, index: list.length - 1, state, task, group })
      }
      return out
    })
  }
}
