/**
 * One batch of finished rollouts → scored training samples and what happened on the way:
 * the sample adapter per rollout, then rollout-level advantages per group. Normalization is
 * per optimizer step (see batching.ts `planUpdate`).
 */
import { RewardStats, type SegmentStarts, type TrainerConfig, UsedStats } from "@reins/protocol"
import { type AdaptedTrace, type AdvantageOptions, scoreRollouts, type ScoredSegment } from "./advantages.js"
import { countStarts, DropTally } from "./drops.js"
import { adaptRollout } from "./samples/adapter.js"
import type { SegmentOptions } from "./samples/segments.js"
import type { RolloutTrace } from "./samples/trace.js"

export interface BatchOptions extends SegmentOptions, AdvantageOptions {
  /** A rollout passes when its final reward is ≥ this. */
  readonly passThreshold: number
}

/** The batch options of a config; `maxTokens` is `max_seq_len` or, when unset, the policy's context. */
export const batchOptions = (config: TrainerConfig, policyContext: number): BatchOptions => ({
  mode: config.segment_mode,
  maxTokens: config.max_seq_len ?? policyContext,
  estimator: config.advantage,
  stdScaling: config.std_scaling,
  perTurn: config.per_turn_rewards,
  missingReward: config.missing_reward,
  passThreshold: config.pass_threshold
})

export interface Batch {
  readonly samples: ReadonlyArray<ScoredSegment>
  readonly reward: RewardStats
  readonly used: UsedStats
  /** Segments the adapter built, by why they started (before any group was skipped). */
  readonly segmentStarts: SegmentStarts
  readonly drops: DropTally
}

export const rewardStats = (rewards: ReadonlyArray<number>, passThreshold: number): RewardStats => {
  const n = rewards.length
  if (n === 0) return new RewardStats({ rollouts: 0, mean: null, passRate: null })
  const sum = rewards.reduce((a, b) => a + b, 0)
  const passed = rewards.filter((r) => r >= passThreshold).length
  return new RewardStats({ rollouts: n, mean: sum / n, passRate: passed / n })
}

export const buildBatch = (traces: ReadonlyArray<RolloutTrace>, options: BatchOptions): Batch => {
  const drops = new DropTally()
  const adapted: Array<AdaptedTrace> = traces.map((trace) => {
    const result = adaptRollout(trace, options)
    drops.merge(result.drops)
    return { trace, segments: result.segments }
  })
  const scored = scoreRollouts(adapted, options)
  drops.merge(scored.drops)
  return {
    samples: scored.samples,
    reward: rewardStats(scored.rewards, options.passThreshold),
    used: new UsedStats({
      groups: scored.groups,
      rollouts: new Set(scored.samples.map((s) => s.rolloutId)).size,
      segments: scored.samples.length,
      tokens: scored.samples.reduce((n, s) => n + s.tokens.length, 0),
      actionTokens: scored.samples.reduce((n, s) => n + s.actionTokens, 0)
    }),
    segmentStarts: countStarts(adapted.flatMap((a) => a.segments.map((s) => s.start))),
    drops
  }
}
