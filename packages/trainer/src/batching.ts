/**
 * From a batch of scored samples to the optimizer steps of one update. The device packs each
 * step into micro-batches that fit its memory (`@reins/policy` device/training.ts `packSteps`).
 *
 * A batch is one optimizer step unless `optimizer_steps` > 1; then it is split by whole task
 * groups (a group's advantages only mean something together), balancing action tokens, and each
 * step is normalized on its own so its weights sum to 1.
 */
import type { LossNormalization } from "@reins/protocol"
import type { ScoredSegment } from "./advantages.js"
import { normalize, type Sample } from "./normalization.js"

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

export interface UpdatePlanOptions {
  readonly optimizerSteps: number
  readonly normalization: LossNormalization
}

/** The optimizer steps of one update, each normalized on its own (its weights sum to 1). */
export const planUpdate = (samples: ReadonlyArray<ScoredSegment>, options: UpdatePlanOptions): ReadonlyArray<ReadonlyArray<Sample>> =>
  splitSteps(samples, options.optimizerSteps).map((part) => normalize(part, options.normalization))
