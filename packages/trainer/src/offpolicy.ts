/**
 * Off-policy bookkeeping. In the async schedules a rollout keeps running across updates, so its
 * tokens were sampled by several policy versions. Staleness of a token = the version being
 * trained − the version that sampled it; admission keeps it ≤ `max_staleness`, this module
 * measures it. Tokens from an older policy are corrected with truncated importance sampling:
 * weight = min(π_old(t) / π_behavior(t), tis_cap), where π_old is the policy at the start of the
 * update (recomputed by the trainer) and π_behavior the logprob recorded when the token was
 * sampled. The cap bounds the variance a very unlikely behavior sample could inject; PPO's clip
 * (and dual-clip for negative advantages) then bounds how far one step moves π from π_old.
 */
import { StalenessStats, type TrainerConfig } from "@reins/protocol"
import type { Segment } from "./samples/segments.js"

/** What the policy's PG loss needs besides the samples. */
export interface LossSettings {
  readonly clipLow: number
  readonly clipHigh: number
  readonly dualClip: number
  readonly tisCap: number
}

export const lossSettings = (config: TrainerConfig): LossSettings => ({
  clipLow: config.clip_low,
  clipHigh: config.clip_high,
  dualClip: config.dual_clip,
  tisCap: config.tis_cap
})

type Versioned = Pick<Segment, "lossMask" | "versions">

/** Histogram of action-token staleness against `current`, with its max and mean. */
export const staleness = (samples: ReadonlyArray<Versioned>, current: number): StalenessStats => {
  const histogram: Array<number> = []
  let tokens = 0
  let sum = 0
  let future = 0
  for (const s of samples) {
    for (let i = 0; i < s.versions.length; i++) {
      if (s.lossMask[i] !== 1) continue
      const age = current - s.versions[i]!
      if (age < 0) {
        future++
        continue
      }
      while (histogram.length <= age) histogram.push(0)
      histogram[age]!++
      tokens++
      sum += age
    }
  }
  return new StalenessStats({ histogram, max: Math.max(0, histogram.length - 1), mean: tokens === 0 ? null : sum / tokens, future })
}

export interface ImportanceStats {
  readonly tokens: number
  /** Mean weight after truncation. */
  readonly mean: number
  /** Fraction of action tokens whose ratio exceeded the cap. */
  readonly truncatedFraction: number
  readonly maxRatio: number
}

/**
 * Truncated importance weights per token (0 on non-action tokens). `current` are the logprobs of
 * the same tokens under π_old, aligned with `behavior`.
 */
export const truncatedImportance = (
  current: Float32Array,
  behavior: Float32Array,
  lossMask: Uint8Array,
  cap: number
): { readonly weights: Float32Array; readonly stats: ImportanceStats } => {
  if (current.length !== behavior.length || lossMask.length !== behavior.length) {
    throw new RangeError(`truncatedImportance: lengths differ (${current.length}, ${behavior.length}, ${lossMask.length})`)
  }
  const weights = new Float32Array(behavior.length)
  let tokens = 0
  let sum = 0
  let truncated = 0
  let maxRatio = 0
  for (let i = 0; i < weights.length; i++) {
    if (lossMask[i] !== 1) continue
    const ratio = Math.exp(current[i]! - behavior[i]!)
    const w = Math.min(ratio, cap)
    weights[i] = w
    tokens++
    sum += w
    if (ratio > cap) truncated++
    if (ratio > maxRatio) maxRatio = ratio
  }
  return {
    weights,
    stats: { tokens, mean: tokens === 0 ? 0 : sum / tokens, truncatedFraction: tokens === 0 ? 0 : truncated / tokens, maxRatio }
  }
}
