/**
 * Loss normalization → per-token weights. The loss of an optimizer step is Σ_t w_t · ℓ_t over
 * its action tokens, and the weights of a step always sum to 1, so micro-batches can be summed
 * (gradient accumulation) without any further division and the step size does not depend on
 * how many tokens the rollouts happened to produce.
 *
 *   rollout  (default)  N rollouts in the step, rollout i has T_i action tokens over all of its
 *                       segments: w = 1 / (N · T_i). Every rollout weighs 1/N whether its calls
 *                       formed one segment or five — how a harness manages its context does not
 *                       change how much its outcome counts.
 *   token    (DAPO)     T action tokens in the step: w = 1 / T. Long rollouts weigh more.
 *   sequence            M segments in the step, segment s has T_s action tokens:
 *                       w = 1 / (M · T_s). A rollout split into many segments weighs more.
 *
 * Weights are 0 on non-action tokens, so they double as the loss mask.
 */
import type { LossNormalization } from "@reins/protocol"
import type { ScoredSegment } from "./advantages.js"

/** A training row: tokens, mask, behavior logprobs and versions, per-token advantages and loss weights. */
export interface Sample extends ScoredSegment {
  readonly weights: Float32Array
}

const weighted = (segment: ScoredSegment, w: number): Sample => {
  const weights = new Float32Array(segment.tokens.length)
  for (let i = 0; i < weights.length; i++) if (segment.lossMask[i] === 1) weights[i] = w
  return { ...segment, weights }
}

/** The weight of each action token of `segment`, per mode, given the step's totals. */
const tokenWeight = (
  mode: LossNormalization,
  segment: ScoredSegment,
  totals: { tokens: number; segments: number; rollouts: number; rolloutTokens: ReadonlyMap<string, number> }
): number => {
  switch (mode) {
    case "token":
      return 1 / totals.tokens
    case "sequence":
      return 1 / (totals.segments * segment.actionTokens)
    case "rollout":
      return 1 / (totals.rollouts * totals.rolloutTokens.get(segment.rolloutId)!)
  }
}

/** Weights for the samples of one optimizer step. Segments without action tokens get all-zero weights. */
export const normalize = (samples: ReadonlyArray<ScoredSegment>, mode: LossNormalization): ReadonlyArray<Sample> => {
  const rolloutTokens = new Map<string, number>()
  let tokens = 0
  let segments = 0
  for (const s of samples) {
    if (s.actionTokens === 0) continue
    tokens += s.actionTokens
    segments++
    rolloutTokens.set(s.rolloutId, (rolloutTokens.get(s.rolloutId) ?? 0) + s.actionTokens)
  }
  const totals = { tokens, segments, rollouts: rolloutTokens.size, rolloutTokens }
  return samples.map((s) => weighted(s, s.actionTokens === 0 ? 0 : tokenWeight(mode, s, totals)))
}

/** Σ weights of each rollout's tokens (for metrics and tests). */
export const weightByRollout = (samples: ReadonlyArray<Sample>): Map<string, number> => {
  const out = new Map<string, number>()
  for (const s of samples) out.set(s.rolloutId, (out.get(s.rolloutId) ?? 0) + s.weights.reduce((a, w) => a + w, 0))
  return out
}
