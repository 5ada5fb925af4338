/**
 * The input of the sample adapter: one rollout as the Trainer sees it once its attempt finished —
 * the calls and rewards of the attempt that counts (the latest), and the task group it belongs to.
 */
import type { Attempt, LlmCall, Reward, Rollout } from "@reins/protocol"

export interface RolloutTrace {
  readonly rolloutId: string
  /** The task group (GRPO baselines are taken over it). A rollout without a group is a group of one. */
  readonly groupId: string
  readonly attemptId: string
  /** The attempt's calls, any order (the adapter orders them by `seq`). */
  readonly calls: ReadonlyArray<LlmCall>
  /** The attempt's rewards: final ones (`callId` null) and per-turn ones. */
  readonly rewards: ReadonlyArray<Reward>
  /** The rollout's final reward, null when it has none: the one its `RolloutEnded` carries. */
  readonly reward: number | null
  /** Calls of earlier attempts of the rollout, left out on purpose (counted as `call-superseded`). */
  readonly superseded: { readonly calls: number; readonly actionTokens: number }
}

/** What the store returns for one rollout (`Store.rolloutTrace(id)`; the trace needs no request or response bodies). */
export interface RolloutRecord {
  readonly rollout: Rollout
  readonly attempts: ReadonlyArray<Attempt>
  readonly calls: ReadonlyArray<LlmCall>
  readonly rewards: ReadonlyArray<Reward>
}

/**
 * The trace of a rollout's latest attempt: the one whose outcome the reward describes. Earlier
 * attempts were retried because they failed; their calls are not trained, but they are counted.
 * `reward` is the final reward the controller ended the rollout with (`RolloutEnded.reward`);
 * without one (a record read on its own) it is the attempt's last final reward in the record.
 */
export const traceOf = (record: RolloutRecord, reward?: number | null): RolloutTrace => {
  const latest = record.attempts.reduce<Attempt | undefined>((a, b) => (a === undefined || b.index > a.index ? b : a), undefined)
  const attemptId = latest?.id ?? ""
  const calls = record.calls.filter((c) => c.attemptId === attemptId)
  const superseded = record.calls.filter((c) => c.attemptId !== attemptId)
  const rewards = record.rewards.filter((r) => r.attemptId === attemptId)
  return {
    rolloutId: record.rollout.id,
    groupId: record.rollout.group ?? record.rollout.id,
    attemptId,
    calls,
    rewards,
    reward: reward === undefined ? finalReward(rewards) : reward,
    superseded: { calls: superseded.length, actionTokens: superseded.reduce((n, c) => n + c.outputIds.length, 0) }
  }
}

/** The calls in the order they were recorded. */
export const bySeq = (calls: ReadonlyArray<LlmCall>): ReadonlyArray<LlmCall> => [...calls].sort((a, b) => a.seq - b.seq)

/**
 * Turn positions: the index (0, 1, ...) of each successful (status 200) call among the
 * attempt's successful calls in `seq` order. Failed calls (retried by the harness) are not
 * turns, so positions line up across the rollouts of a group.
 */
export const turnPositions = (calls: ReadonlyArray<LlmCall>): Map<string, number> => {
  const positions = new Map<string, number>()
  for (const call of bySeq(calls)) if (call.status === 200) positions.set(call.id, positions.size)
  return positions
}

/** The final reward of the attempt: the last one posted without a `callId`, or null. */
export const finalReward = (rewards: ReadonlyArray<Reward>): number | null => {
  let last: Reward | null = null
  for (const r of rewards) if (r.callId === null && (last === null || r.createdAt >= last.createdAt)) last = r
  return last?.value ?? null
}
