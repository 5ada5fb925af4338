/**
 * Which sequences each SFT optimizer step trains on, and their loss weights.
 *
 * Epochs are seeded shuffles of all sequences laid end to end; step k takes the next `batchSize`
 * of that stream, so `steps` may stop mid-epoch and `epochs` may be fractional. The same seed
 * gives the same plan on every machine. Loss weights are token-normalized per step: every
 * assistant token of the step weighs 1/T (T = assistant tokens in the step), so the step's loss
 * is the mean cross-entropy per assistant token and does not depend on how long demos are.
 */
import { seededRandom, shuffleInPlace } from "@reins/protocol"
import type { SftSequence } from "./sequences.js"

export interface PlanOptions {
  /** Number of sequences. */
  readonly count: number
  /** Sequences per optimizer step (the last step of a plan may hold fewer when `epochs` is set). */
  readonly batchSize: number
  /** Exactly this many steps; takes precedence over `epochs`. */
  readonly steps?: number | undefined
  /** Passes over the data (may be fractional); default 1. */
  readonly epochs?: number | undefined
  readonly seed: number
}

/** Steps needed for `epochs` passes over `count` sequences in batches of `batchSize`. */
export const stepsForEpochs = (count: number, batchSize: number, epochs: number): number => Math.max(1, Math.ceil((count * epochs) / batchSize))

/** The sequence indices of every step. */
export const planSteps = (o: PlanOptions): Array<Int32Array> => {
  if (!(Number.isInteger(o.count) && o.count > 0)) throw new Error(`planSteps: count must be a positive integer, got ${o.count}`)
  if (!(Number.isInteger(o.batchSize) && o.batchSize > 0)) throw new Error(`planSteps: batchSize must be a positive integer, got ${o.batchSize}`)
  const steps = o.steps ?? stepsForEpochs(o.count, o.batchSize, o.epochs ?? 1)
  const total = o.steps !== undefined ? steps * o.batchSize : Math.min(steps * o.batchSize, Math.ceil(o.count * (o.epochs ?? 1)))
  const random = seededRandom(o.seed)
  const stream = new Int32Array(total)
  let filled = 0
  while (filled < total) {
    const order = shuffleInPlace(Int32Array.from({ length: o.count }, (_, i) => i), random)
    const n = Math.min(order.length, total - filled)
    stream.set(order.subarray(0, n), filled)
    filled += n
  }
  const plan: Array<Int32Array> = []
  for (let at = 0; at < total; at += o.batchSize) plan.push(stream.slice(at, Math.min(total, at + o.batchSize)))
  return plan
}

/** A step's sequences with token-normalized weights (they sum to 1 over the step). */
export const tokenNormalized = (sequences: ReadonlyArray<SftSequence>, indices: ArrayLike<number>): Array<{ tokens: Int32Array; weights: Float32Array }> => {
  let total = 0
  for (let i = 0; i < indices.length; i++) total += sequences[indices[i]!]!.assistantTokens
  const scale = total > 0 ? 1 / total : 0
  return Array.from(indices, (i) => {
    const s = sequences[i]!
    const weights = new Float32Array(s.weights.length)
    for (let t = 0; t < weights.length; t++) weights[t] = s.weights[t]! * scale
    return { tokens: s.tokens, weights }
  })
}
