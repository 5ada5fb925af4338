/**
 * From a batch of scored samples to what the device runs: optimizer steps, each split into
 * micro-batches that fit the device memory, with gradients accumulated across them.
 *
 * How many samples a batch holds is known only once its rollouts are finished (segments vary),
 * so micro-batches are packed by a token budget: a micro-batch is padded to its longest row,
 * so it costs rows × longest tokens, and that must stay ≤ `micro_batch_tokens`. Rows are packed
 * longest first, which keeps padding small (rows of similar length end up together).
 *
 * A batch is one optimizer step unless `optimizer_steps` > 1; then it is split by whole task
 * groups (a group's advantages only mean something together), balancing action tokens, and each
 * step is normalized on its own so its weights sum to 1.
 */
import type { LossNormalization } from "@reins/protocol"
import type { ScoredSegment } from "./advantages.js"
import { normalize, type Sample } from "./normalization.js"

/**
 * Micro-batches as indices into `lengths`: each costs (rows × its longest row) ≤ `budget`. A row
 * longer than the budget gets a micro-batch of its own (the config keeps `max_seq_len` ≤ budget).
 */
export const packMicroBatches = (lengths: ArrayLike<number>, budget: number): Array<Int32Array> => {
  const order = Array.from({ length: lengths.length }, (_, i) => i).sort((a, b) => lengths[b]! - lengths[a]! || a - b)
  const batches: Array<Int32Array> = []
  let i = 0
  while (i < order.length) {
    // Sorted longest first: the first row of a micro-batch sets its padded length.
    const longest = Math.max(1, lengths[order[i]!]!)
    const rows = Math.max(1, Math.floor(budget / longest))
    batches.push(Int32Array.from(order.slice(i, i + rows)))
    i += rows
  }
  return batches
}

/** Splits samples into `steps` parts by whole groups, balancing action tokens; empty parts are left out. */
export const splitSteps = <S extends ScoredSegment>(samples: ReadonlyArray<S>, steps: number): Array<Array<S>> => {
  if (steps <= 1) return samples.length === 0 ? [] : [[...samples]]
  const groupTokens = new Map<string, number>()
  for (const s of samples) groupTokens.set(s.groupId, (groupTokens.get(s.groupId) ?? 0) + s.actionTokens)
  const load = new Array<number>(steps).fill(0)
  const stepOf = new Map<string, number>()
  // Largest group first onto the least loaded step: a simple, deterministic balance.
  const groups = [...groupTokens].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
  for (const [group, tokens] of groups) {
    const step = load.indexOf(Math.min(...load))
    stepOf.set(group, step)
    load[step]! += tokens
  }
  const parts = Array.from({ length: steps }, () => [] as Array<S>)
  for (const s of samples) parts[stepOf.get(s.groupId)!]!.push(s)
  return parts.filter((p) => p.length > 0)
}

export interface UpdateStep {
  /** Normalized on their own: the weights of a step sum to 1. */
  readonly samples: ReadonlyArray<Sample>
  readonly microBatches: ReadonlyArray<ReadonlyArray<Sample>>
}

export interface UpdatePlanOptions {
  readonly optimizerSteps: number
  readonly normalization: LossNormalization
  readonly microBatchTokens: number
}

/** The optimizer steps of one update, each with its micro-batches. */
export const planUpdate = (samples: ReadonlyArray<ScoredSegment>, options: UpdatePlanOptions): ReadonlyArray<UpdateStep> =>
  splitSteps(samples, options.optimizerSteps).map((part) => {
    const weighted = normalize(part, options.normalization)
    const microBatches = packMicroBatches(
      weighted.map((s) => s.tokens.length),
      options.microBatchTokens
    ).map((indices) => Array.from(indices, (i) => weighted[i]!))
    return { samples: weighted, microBatches }
  })
