/**
 * One optimizer step over a batch of micro-batches: forward + backward per micro-batch with the
 * gradients summed across them (the losses are already weighted sums, see losses.ts), then one
 * AdamW update with global-norm clipping. Returns the step's stats in the shape the device
 * sends them (`TrainStepStats`), so no layer in between renames them.
 *
 * Every value read back from the device (losses, entropies, the gradient norm, scores) is read
 * asynchronously: WebGPU in Node has no synchronous read, and wasm resolves these at once.
 */
import { PgStepStats, TrainStepStats } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import type { Transformer } from "../model/transformer.js"
import { type LossOutput, type Objective, pgStats, type PgStats, policyGradientLoss, sftLoss } from "./losses.js"
import { type MicroBatch, PackingError, packSequences, type PackOptions, type TrainingSequence, unpack } from "./microbatch.js"
import type { AdamW } from "./optimizer.js"

interface MicroResult {
  readonly loss: number
  readonly grads: Map<string, tf.Tensor>
  readonly entropySum: number
  readonly pg: PgStats | undefined
}

/** Loss and gradients of one micro-batch (gradients by parameter name; the caller disposes them). */
export const microBatchGradients = async (model: Transformer, batch: MicroBatch, objective: Objective): Promise<MicroResult> => {
  if (objective.kind === "pg" && !batch.hasPolicyGradientInputs) {
    throw new PackingError({ message: "the policy-gradient loss needs advantages and behaviorLogprobs on every sequence" })
  }
  const names = new Map(model.variables().map((v) => [v.name, v] as const))
  let kept: { readonly entropy: tf.Tensor1D; readonly logprobs: tf.Tensor1D; readonly old: Float32Array | undefined } | undefined
  const { value, grads } = tf.variableGrads(() => {
    const scores = model.tokenLogprobs(batch, batch.targets, { training: true })
    const out: LossOutput = objective.kind === "sft" ? sftLoss(scores, batch) : policyGradientLoss(scores, batch, objective)
    // read after the step's work is queued, not in the middle of it
    kept = { entropy: tf.keep(out.entropy), logprobs: tf.keep(out.logprobs), old: out.oldLogprobs }
    return out.loss
  }, model.variables())
  let loss: number
  let entropySum = 0
  let pg: PgStats | undefined
  try {
    const [lossValue, entropy, logprobs] = await Promise.all([value.data(), kept!.entropy.data(), objective.kind === "pg" ? kept!.logprobs.data() : undefined])
    loss = lossValue[0]!
    for (let i = 0; i < entropy.length; i++) if (batch.weights[i] !== 0) entropySum += entropy[i]!
    if (objective.kind === "pg") pg = pgStats(batch, logprobs as Float32Array, kept!.old ?? (logprobs as Float32Array), objective)
  } catch (e) {
    for (const g of Object.values(grads)) g.dispose()
    throw e
  } finally {
    tf.dispose([value, kept!.entropy, kept!.logprobs])
  }
  const byName = new Map<string, tf.Tensor>()
  for (const [name, param] of model.trainable) {
    const g = grads[param.name]
    if (g === undefined) throw new Error(`no gradient for ${name}`)
    byName.set(name, g)
  }
  for (const [varName, g] of Object.entries(grads)) if (!names.has(varName)) g.dispose()
  return { loss, grads: byName, entropySum, pg }
}

/** The micro-batches' PG diagnostics, weighted by their trained tokens. */
const mergePg = (parts: ReadonlyArray<PgStats>): PgStepStats | undefined => {
  if (parts.length === 0) return undefined
  const tokens = parts.reduce((n, p) => n + p.tokens, 0)
  const avg = (f: (p: PgStats) => number) => (tokens === 0 ? 0 : parts.reduce((s, p) => s + f(p) * p.tokens, 0) / tokens)
  return new PgStepStats({
    clipFraction: avg((p) => p.clipFraction),
    dualClipFraction: avg((p) => p.dualClipFraction),
    meanRatio: avg((p) => p.meanRatio),
    meanImportanceWeight: avg((p) => p.meanImportanceWeight),
    truncatedFraction: avg((p) => p.truncatedFraction),
    approxKl: avg((p) => p.approxKl)
  })
}

/** Accumulates gradients over `batches` and applies one optimizer update. */
export const trainStep = async (model: Transformer, optimizer: AdamW, batches: ReadonlyArray<MicroBatch>, objective: Objective): Promise<TrainStepStats> => {
  if (batches.length === 0) throw new Error("trainStep needs at least one micro-batch")
  const started = performance.now()
  let acc: Map<string, tf.Tensor> | undefined
  let loss = 0
  let entropySum = 0
  let tokens = 0
  const pgParts: Array<PgStats> = []
  try {
    for (const batch of batches) {
      const r = await microBatchGradients(model, batch, objective)
      loss += r.loss
      entropySum += r.entropySum
      tokens += batch.trainedTokens
      if (r.pg !== undefined) pgParts.push(r.pg)
      if (acc === undefined) acc = r.grads
      else {
        for (const [name, g] of r.grads) {
          const sum = tf.add(acc.get(name)!, g)
          acc.get(name)!.dispose()
          g.dispose()
          acc.set(name, sum)
        }
      }
    }
    const { gradNorm, clipped, lr } = await optimizer.apply(acc!)
    const pg = mergePg(pgParts)
    return new TrainStepStats({
      loss,
      tokens,
      microBatches: batches.length,
      gradNorm,
      clipped,
      lr,
      entropy: tokens === 0 ? 0 : entropySum / tokens,
      ...(pg !== undefined ? { pg } : {}),
      seconds: (performance.now() - started) / 1000
    })
  } finally {
    if (acc !== undefined) for (const g of acc.values()) g.dispose()
  }
}

/**
 * log π(tokens[i] | tokens[..i)) under the model's current weights for every sequence, aligned
 * with its tokens (index 0 is NaN). Used for π_old before several optimizer steps, and in tests.
 */
export const scoreSequences = async (model: Transformer, sequences: ReadonlyArray<TrainingSequence>, options: PackOptions): Promise<Array<Float32Array>> => {
  const out: Array<Float32Array | undefined> = sequences.map(() => undefined)
  for (const batch of packSequences(sequences, options)) {
    const values = tf.tidy(() => {
      const { entropy, logprobs } = model.tokenLogprobs(batch, batch.targets)
      entropy.dispose()
      return logprobs
    })
    try {
      unpack(batch, (await values.data()) as Float32Array, out, sequences)
    } finally {
      values.dispose()
    }
  }
  return out.map((o, i) => o ?? Float32Array.from({ length: sequences[i]!.tokens.length }, () => NaN))
}
