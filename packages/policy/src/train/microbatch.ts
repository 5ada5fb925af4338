/**
 * From training sequences to micro-batches the device can run.
 *
 * A sequence of L tokens gives L − 1 predictions (token i+1 from tokens 0..i); every per-token
 * array of a `TrainingSequence` is aligned with `tokens`, so `weights[i]` is the loss weight of
 * predicting `tokens[i]` (`weights[0]` is never used) — the layout the Trainer's samples have
 * (loss mask, behavior logprobs and advantages sit on the action token itself).
 *
 * Packing: sequences are placed end to end in rows of at most `maxSeqLen` predictions (first fit,
 * longest first; `pack: false` gives every sequence its own row); attention never crosses a
 * sequence boundary and positions restart with each sequence. Rows are then grouped into
 * micro-batches padded to their longest row, with rows × padded length ≤ `maxTokens` (a row
 * longer than the budget gets a micro-batch of its own). Padding has weight 0.
 */
import { Data } from "effect"
import type { TokenBatch } from "../model/transformer.js"

export interface TrainingSequence {
  readonly tokens: Int32Array
  /** Loss weight of predicting tokens[i] (0: not trained). The caller decides normalization. */
  readonly weights: Float32Array
  /** Policy gradient: per-token advantage. */
  readonly advantages?: Float32Array
  /** Policy gradient: log-probability of tokens[i] under the policy that sampled it. */
  readonly behaviorLogprobs?: Float32Array
  /** Policy gradient: log π_old(tokens[i]) for the PPO ratio; default: the current policy. */
  readonly oldLogprobs?: Float32Array
}

export class PackingError extends Data.TaggedError("PackingError")<{ readonly message: string }> {}

/** Where the predictions of one sequence sit in a micro-batch. */
export interface Placement {
  /** Index of the sequence in the list given to `packSequences`. */
  readonly sequence: number
  /** Flat index (row · seqLen + column) of its first prediction. */
  readonly offset: number
  /** Number of predictions (tokens.length − 1). */
  readonly length: number
}

export interface MicroBatch extends TokenBatch {
  /** The token each slot predicts. */
  readonly targets: Int32Array
  readonly weights: Float32Array
  readonly advantages: Float32Array
  readonly behaviorLogprobs: Float32Array
  /** Present when every sequence in the batch came with `oldLogprobs`. */
  readonly oldLogprobs: Float32Array | undefined
  /** Every sequence came with advantages and behavior logprobs (the PG loss needs both). */
  readonly hasPolicyGradientInputs: boolean
  readonly placements: ReadonlyArray<Placement>
  /** Slots with a non-zero weight. */
  readonly trainedTokens: number
}

export interface PackOptions {
  /** Upper bound on rows × padded row length per micro-batch (wasm: ≤ 16×256 = 4096). */
  readonly maxTokens: number
  /** Longest row (≤ the model's context). */
  readonly maxSeqLen: number
  /** Several sequences per row (default true). */
  readonly pack?: boolean
}

interface Row {
  fill: number
  readonly items: Array<number>
}

const ALIGN = 8

/** Packs sequences into micro-batches. Fails with `PackingError` if a sequence is too long. */
export const packSequences = (sequences: ReadonlyArray<TrainingSequence>, options: PackOptions): Array<MicroBatch> => {
  const { maxTokens, maxSeqLen } = options
  if (!(maxSeqLen >= 1 && maxTokens >= 1)) throw new PackingError({ message: `invalid packing budget: maxTokens ${maxTokens}, maxSeqLen ${maxSeqLen}` })
  const order: Array<number> = []
  sequences.forEach((s, i) => {
    checkSequence(s, i)
    const predictions = s.tokens.length - 1
    if (predictions > maxSeqLen) {
      throw new PackingError({ message: `sequence ${i} has ${s.tokens.length} tokens, more than a row of ${maxSeqLen} + 1` })
    }
    if (predictions >= 1) order.push(i)
  })
  const length = (i: number) => sequences[i]!.tokens.length - 1
  order.sort((a, b) => length(b) - length(a) || a - b)

  const rows: Array<Row> = []
  for (const i of order) {
    const row = options.pack === false ? undefined : rows.find((r) => r.fill + length(i) <= maxSeqLen)
    if (row === undefined) rows.push({ fill: length(i), items: [i] })
    else {
      row.fill += length(i)
      row.items.push(i)
    }
  }
  rows.sort((a, b) => b.fill - a.fill)

  const batches: Array<MicroBatch> = []
  let i = 0
  while (i < rows.length) {
    const seqLen = Math.min(maxSeqLen, Math.ceil(rows[i]!.fill / ALIGN) * ALIGN)
    const count = Math.max(1, Math.floor(maxTokens / seqLen))
    batches.push(buildBatch(sequences, rows.slice(i, i + count), seqLen))
    i += count
  }
  return batches
}

const checkSequence = (s: TrainingSequence, i: number): void => {
  const n = s.tokens.length
  const check = (name: string, a: ArrayLike<number> | undefined) => {
    if (a !== undefined && a.length !== n) throw new PackingError({ message: `sequence ${i}: ${name} has ${a.length} entries for ${n} tokens` })
  }
  check("weights", s.weights)
  check("advantages", s.advantages)
  check("behaviorLogprobs", s.behaviorLogprobs)
  check("oldLogprobs", s.oldLogprobs)
}

const buildBatch = (sequences: ReadonlyArray<TrainingSequence>, rows: ReadonlyArray<Row>, seqLen: number): MicroBatch => {
  const size = rows.length * seqLen
  const inputIds = new Int32Array(size)
  const targets = new Int32Array(size)
  const positions = new Int32Array(size)
  const segments = new Int32Array(size).fill(-1)
  const weights = new Float32Array(size)
  const advantages = new Float32Array(size)
  const behaviorLogprobs = new Float32Array(size)
  const withOld = rows.every((r) => r.items.every((i) => sequences[i]!.oldLogprobs !== undefined))
  const hasPolicyGradientInputs = rows.every((r) => r.items.every((i) => sequences[i]!.advantages !== undefined && sequences[i]!.behaviorLogprobs !== undefined))
  const oldLogprobs = withOld ? new Float32Array(size) : undefined
  const placements: Array<Placement> = []
  let trainedTokens = 0
  rows.forEach((row, r) => {
    let col = 0
    row.items.forEach((index, segment) => {
      const s = sequences[index]!
      const n = s.tokens.length - 1
      const offset = r * seqLen + col
      placements.push({ sequence: index, offset, length: n })
      for (let i = 0; i < n; i++) {
        const at = offset + i
        inputIds[at] = s.tokens[i]!
        targets[at] = s.tokens[i + 1]!
        positions[at] = i
        segments[at] = segment
        weights[at] = s.weights[i + 1]!
        if (weights[at] !== 0) trainedTokens++
        if (s.advantages !== undefined) advantages[at] = s.advantages[i + 1]!
        if (s.behaviorLogprobs !== undefined) behaviorLogprobs[at] = s.behaviorLogprobs[i + 1]!
        if (oldLogprobs !== undefined) oldLogprobs[at] = s.oldLogprobs![i + 1]!
      }
      col += n
    })
  })
  return {
    rows: rows.length,
    seqLen,
    inputIds,
    targets,
    positions,
    segments,
    weights,
    advantages,
    behaviorLogprobs,
    oldLogprobs,
    hasPolicyGradientInputs,
    placements,
    trainedTokens
  }
}

/** Splits per-slot values of a micro-batch back into per-sequence arrays aligned with tokens (index 0 = NaN). */
export const unpack = (batch: MicroBatch, values: Float32Array, into: Array<Float32Array | undefined>, sequences: ReadonlyArray<TrainingSequence>): void => {
  for (const p of batch.placements) {
    const out = new Float32Array(sequences[p.sequence]!.tokens.length)
    out[0] = NaN
    out.set(values.subarray(p.offset, p.offset + p.length), 1)
    into[p.sequence] = out
  }
}
