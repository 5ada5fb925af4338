/**
 * The losses the Trainer optimizes, as sums over a micro-batch's slots weighted by the caller's
 * per-token weights (the Trainer decides normalization; weights are 0 on tokens not trained), so
 * micro-batch losses add up to the step's loss and gradients can simply be accumulated.
 *
 * SFT (token cross-entropy):   L = −Σ_t w_t · log π(y_t)
 *
 * Policy gradient (PPO with dual-clip and truncated importance sampling):
 *   r_t   = π(y_t) / π_old(y_t)                   π_old: the policy at the start of the update
 *                                                 (given, or else the current policy with its
 *                                                 gradient stopped, which is exact for the first
 *                                                 optimizer step of an update)
 *   ρ_t   = min(π_old(y_t) / μ(y_t), tisCap)      μ: the behavior policy that sampled y_t (its
 *                                                 recorded logprob); corrects stale tokens
 *   ℓ_t   = max(−A_t·r_t, −A_t·clip(r_t, 1−clipLow, 1+clipHigh))
 *   ℓ_t   = min(ℓ_t, −dualClip·A_t)   when A_t < 0 (dual-clip: bounded loss for negative advantages)
 *   L     = Σ_t w_t · ρ_t · ℓ_t
 *
 * Each returns the scalar loss (for the gradient) and the per-slot log-probabilities; `pgStats`
 * computes the diagnostics from those values in JavaScript.
 */
import * as tf from "@tensorflow/tfjs"
import type { HeadLogprobs } from "../model/headLogprobs.js"
import { upload } from "../model/heap.js"
import { type MicroBatch, PackingError } from "./microbatch.js"

export interface PgSettings {
  readonly clipLow: number
  readonly clipHigh: number
  readonly dualClip: number
  readonly tisCap: number
}

export const DEFAULT_PG: PgSettings = { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, tisCap: 2 }

export type Objective = { readonly kind: "sft" } | ({ readonly kind: "pg" } & PgSettings)

export interface LossOutput {
  readonly loss: tf.Scalar
  /** log π(y_t) per slot (no gradient needed; read it after the step). */
  readonly logprobs: tf.Tensor1D
  /** Entropy of π at every slot (no gradient; kept out of tidies: the caller disposes it). */
  readonly entropy: tf.Tensor1D
  /** log π_old per slot as the batch brought it (undefined: π_old was the current values, `logprobs`). */
  readonly oldLogprobs: Float32Array | undefined
}

/** −Σ w·log π(y), from the model's log-probabilities of the batch's targets (`Transformer.tokenLogprobs`). */
export const sftLoss = ({ entropy, logprobs }: HeadLogprobs, batch: MicroBatch): LossOutput => {
  const loss = tf.neg(tf.sum(tf.mul(logprobs, upload(batch.weights, [batch.weights.length])))) as tf.Scalar
  return { loss, logprobs, entropy, oldLogprobs: undefined }
}

/** `x`'s values as a constant: no gradient flows back through it (tfjs has no stop-gradient op). */
const stopGradient: (x: tf.Tensor1D) => tf.Tensor1D = tf.customGrad(
  // @ts-expect-error tfjs types customGrad's callback with a rest parameter list
  (x: tf.Tensor1D) => ({ value: tf.clone(x), gradFunc: (dy: tf.Tensor) => tf.zerosLike(dy) })
)

/**
 * The PPO dual-clip loss with truncated importance sampling (see the module comment), computed
 * on the backend: π_old, when the batch brings none, is the current values with the gradient
 * stopped, never read back (WebGPU in Node cannot read synchronously).
 */
export const policyGradientLoss = ({ entropy, logprobs }: HeadLogprobs, batch: MicroBatch, s: PgSettings): LossOutput => {
  if (!batch.hasPolicyGradientInputs) throw new PackingError({ message: "the policy-gradient loss needs advantages and behaviorLogprobs on every sequence" })
  const n = batch.targets.length
  const negative = new Float32Array(n)
  for (let i = 0; i < n; i++) negative[i] = batch.advantages[i]! < 0 ? 1 : 0
  const loss = tf.tidy(() => {
    const old = batch.oldLogprobs === undefined ? stopGradient(logprobs) : upload<tf.Rank.R1>(batch.oldLogprobs, [n])
    // ρ = min(π_old / μ, cap), times the token's weight
    const rho = tf.minimum(tf.exp(tf.sub(old, upload(batch.behaviorLogprobs, [n]))), s.tisCap)
    const coeff = tf.mul(upload(batch.weights, [n]), rho)
    const adv = upload<tf.Rank.R1>(batch.advantages, [n])
    const ratio = tf.exp(tf.sub(logprobs, old))
    const unclipped = tf.mul(tf.neg(adv), ratio)
    const clipped = tf.mul(tf.neg(adv), tf.clipByValue(ratio, 1 - s.clipLow, 1 + s.clipHigh))
    const ppo = tf.maximum(unclipped, clipped)
    // Dual clip on negative advantages: min(ppo, −c·A), selected by a 0/1 mask.
    const neg = upload<tf.Rank.R1>(negative, [n])
    const dual = tf.minimum(ppo, tf.mul(tf.neg(adv), s.dualClip))
    const perToken = tf.add(ppo, tf.mul(neg, tf.sub(dual, ppo)))
    return tf.sum(tf.mul(perToken, coeff)) as tf.Scalar
  })
  return { loss, logprobs, entropy, oldLogprobs: batch.oldLogprobs }
}

export interface PgStats {
  /** Trained slots (weight ≠ 0). */
  readonly tokens: number
  /** Fraction of trained slots whose PPO clip was active (no gradient through the ratio). */
  readonly clipFraction: number
  /** Fraction of trained negative-advantage slots held by the dual clip. */
  readonly dualClipFraction: number
  readonly meanRatio: number
  /** Mean truncated importance weight, and the fraction of slots the cap truncated. */
  readonly meanImportanceWeight: number
  readonly truncatedFraction: number
  /** Mean of log π_old − log π (k1 estimate of KL(π_old‖π)). */
  readonly approxKl: number
}

/** Diagnostics of the PG loss over a micro-batch, from the per-slot values. */
export const pgStats = (batch: MicroBatch, logprobs: Float32Array, old: Float32Array, s: PgSettings): PgStats => {
  let tokens = 0
  let clipped = 0
  let negatives = 0
  let dual = 0
  let ratioSum = 0
  let rhoSum = 0
  let truncated = 0
  let kl = 0
  for (let i = 0; i < logprobs.length; i++) {
    if (batch.weights[i] === 0) continue
    tokens++
    const a = batch.advantages[i]!
    const r = Math.exp(logprobs[i]! - old[i]!)
    const raw = Math.exp(old[i]! - batch.behaviorLogprobs[i]!)
    ratioSum += r
    rhoSum += Math.min(raw, s.tisCap)
    if (raw > s.tisCap) truncated++
    kl += old[i]! - logprobs[i]!
    if ((a > 0 && r > 1 + s.clipHigh) || (a < 0 && r < 1 - s.clipLow)) clipped++
    if (a < 0) {
      negatives++
      if (Math.max(r, Math.min(Math.max(r, 1 - s.clipLow), 1 + s.clipHigh)) > s.dualClip) dual++
    }
  }
  const mean = (x: number, n: number) => (n === 0 ? 0 : x / n)
  return {
    tokens,
    clipFraction: mean(clipped, tokens),
    dualClipFraction: mean(dual, negatives),
    meanRatio: mean(ratioSum, tokens),
    meanImportanceWeight: mean(rhoSum, tokens),
    truncatedFraction: mean(truncated, tokens),
    approxKl: mean(kl, tokens)
  }
}
