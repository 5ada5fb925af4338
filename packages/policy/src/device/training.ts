/**
 * The device side of `Train` and `Score`: checking the Trainer's samples against the model,
 * π_old before a multi-step update, packing, one `trainStep` per step. Runs in the device's
 * worker (loads TensorFlow.js).
 */
import { DeviceError, type TrainRequest, type TrainSample, type TrainSettings, type TrainStepStats } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Effect } from "effect"
import { yieldToEventLoop } from "../engine/engine.js"
import type { ModelConfig } from "../model/config.js"
import type { Transformer } from "../model/transformer.js"
import type { Objective } from "../train/losses.js"
import { type MicroBatch, packSequences, type PackOptions, type TrainingSequence } from "../train/microbatch.js"
import { AdamW, type OptimizerState } from "../train/optimizer.js"
import { scoreSequences, trainStep } from "../train/step.js"
import { takeGpuErrors } from "../gpuErrors.js"

const invalid = (message: string) => new DeviceError({ message: `Train: ${message}` })

export const checkIds = (tokens: Int32Array, vocabSize: number, where: string): void => {
  for (let i = 0; i < tokens.length; i++) {
    const id = tokens[i]!
    if (!(id >= 0 && id < vocabSize)) throw new DeviceError({ message: `${where}: token id ${id} at position ${i} is outside the vocabulary of ${vocabSize}` })
  }
}

/** Checks one sample; returns it as a `TrainingSequence`. Throws `DeviceError` naming the sample. */
const toSequence = (sample: TrainSample, where: string, settings: TrainSettings, config: ModelConfig): TrainingSequence => {
  const n = sample.tokens.length
  if (n < 2) throw invalid(`${where} has ${n} token(s); a sample needs at least 2 (one prediction)`)
  if (n - 1 > settings.maxSeqLen) {
    throw invalid(`${where} has ${n} tokens (${n - 1} predictions), more than maxSeqLen ${settings.maxSeqLen}`)
  }
  checkIds(sample.tokens, config.vocabSize, `Train: ${where}`)
  const aligned = (name: string, a: Float32Array | undefined) => {
    if (a !== undefined && a.length !== n) throw invalid(`${where}: ${name} has ${a.length} entries for ${n} tokens`)
  }
  aligned("weights", sample.weights)
  aligned("advantages", sample.advantages)
  aligned("behaviorLogprobs", sample.behaviorLogprobs)
  if (settings.objective.kind === "pg" && (sample.advantages === undefined || sample.behaviorLogprobs === undefined)) {
    throw invalid(`${where}: the pg objective needs advantages and behaviorLogprobs`)
  }
  for (let i = 1; i < n; i++) {
    const w = sample.weights[i]!
    if (!Number.isFinite(w)) throw invalid(`${where}: weight ${w} at position ${i} is not finite`)
    if (w === 0 || settings.objective.kind !== "pg") continue
    const a = sample.advantages![i]!
    const b = sample.behaviorLogprobs![i]!
    if (!Number.isFinite(a)) throw invalid(`${where}: advantage ${a} at position ${i} is not finite`)
    if (!(b <= 0)) throw invalid(`${where}: behavior logprob ${b} at position ${i} is not a finite value ≤ 0`)
  }
  return {
    tokens: sample.tokens,
    weights: sample.weights,
    ...(sample.advantages !== undefined ? { advantages: sample.advantages } : {}),
    ...(sample.behaviorLogprobs !== undefined ? { behaviorLogprobs: sample.behaviorLogprobs } : {})
  }
}

/** The request's samples as steps × sequences, all checked. */
export const checkTrainRequest = (request: TrainRequest, config: ModelConfig): Array<Array<TrainingSequence>> => {
  const { settings, steps } = request
  if (steps.length === 0) throw invalid("no steps")
  if (settings.maxSeqLen > config.contextLength) {
    throw invalid(`maxSeqLen ${settings.maxSeqLen} is more than the model's context of ${config.contextLength}`)
  }
  return steps.map((step, s) => {
    if (step.length === 0) throw invalid(`step ${s} has no samples`)
    return step.map((sample, k) => toSequence(sample, `step ${s}, sample ${k}`, settings, config))
  })
}

/** Adds π_old (the current weights' logprobs) to every sequence: the PPO ratio's denominator. */
export const withOldLogprobs = async (
  model: Transformer,
  steps: Array<Array<TrainingSequence>>,
  packing: PackOptions
): Promise<Array<Array<TrainingSequence>>> => {
  const old = await scoreSequences(model, steps.flat(), packing)
  let i = 0
  return steps.map((step) => step.map((seq) => ({ ...seq, oldLogprobs: old[i++]! })))
}

/**
 * Each step's micro-batches. Packing lives here, beside the memory it must fit: the device knows
 * its backend and heap; the Trainer only says which samples make a step.
 */
export const packSteps = (steps: Array<Array<TrainingSequence>>, packing: PackOptions): Array<Array<MicroBatch>> =>
  steps.map((step) => packSequences(step, packing))

/**
 * The device's AdamW, kept across updates. The learning rate is read at every step (so each
 * request sets it); weight decay and clipping are fixed at construction, so a request that
 * changes them gets a new optimizer carrying the moments and step count over.
 */
export class DeviceOptimizer {
  private adam: AdamW | undefined
  private lr = 0
  private weightDecay = 0
  private maxGradNorm: number | undefined

  constructor(private readonly model: Transformer) {}

  get current(): AdamW | undefined {
    return this.adam
  }

  /**
   * The optimizer for an update with these settings (new settings carry the moments over, on the
   * backend: no copy to the host and back).
   */
  configure(settings: { readonly lr: number; readonly weightDecay: number; readonly maxGradNorm?: number | undefined }): AdamW {
    this.lr = settings.lr
    if (this.adam !== undefined && this.weightDecay === settings.weightDecay && this.maxGradNorm === settings.maxGradNorm) return this.adam
    const previous = this.adam
    const state = previous?.snapshot()
    let next: AdamW | undefined
    try {
      next = this.make(settings)
      if (state !== undefined) next.importState(state)
    } catch (e) {
      next?.dispose()
      throw e
    } finally {
      if (state !== undefined) tf.dispose(Object.values(state.tensors))
    }
    // Only now: on an error above, the optimizer and its settings stay as they were.
    previous?.dispose()
    this.weightDecay = settings.weightDecay
    this.maxGradNorm = settings.maxGradNorm
    return (this.adam = next)
  }

  /**
   * Takes restored state: a checkpoint's, or a rollback point's snapshot (its tensors stay the
   * caller's). Checked first: on error nothing changes. `undefined` starts fresh.
   */
  restore(state: OptimizerState<Float32Array | tf.Tensor> | undefined): void {
    if (state === undefined) {
      this.adam?.dispose()
      this.adam = undefined
      return
    }
    // Into the optimizer there is (its moments checked first), else a new one.
    const target = this.adam ?? this.make()
    try {
      target.importState(state)
    } catch (e) {
      if (target !== this.adam) target.dispose()
      throw e
    }
    this.adam = target
  }

  dispose(): void {
    this.adam?.dispose()
    this.adam = undefined
  }

  private make(settings: { readonly weightDecay: number; readonly maxGradNorm?: number | undefined } = { weightDecay: this.weightDecay, maxGradNorm: this.maxGradNorm }): AdamW {
    return new AdamW(this.model.trainable, {
      lr: () => this.lr,
      weightDecay: settings.weightDecay,
      ...(settings.maxGradNorm !== undefined ? { maxGradNorm: settings.maxGradNorm } : {})
    })
  }
}

/**
 * The errors the GPU reported during `what` without throwing (gpuErrors.ts), as the error that
 * fails it, or undefined: what it computed came from buffers that were never made.
 */
export const gpuFailure = (what: string): DeviceError | undefined => {
  const reported = takeGpuErrors()
  return reported === undefined ? undefined : new DeviceError({ message: `${what}: the GPU reported an error, so nothing computed since is used: ${reported}` })
}

/**
 * Runs the update's steps (yielding to the event loop between them). A step is not interrupted:
 * its promise cannot be stopped, and left running it would apply its update after the rollback
 * (on WebGPU, whose reads let the event loop run, an interruption lands mid-step). One that comes
 * during a step takes effect when the step ends. A step in which the GPU reported an error fails
 * the update (and so rolls it back).
 */
export const runSteps = (
  model: Transformer,
  optimizer: AdamW,
  steps: Array<Array<MicroBatch>>,
  objective: Objective
): Effect.Effect<Array<TrainStepStats>, DeviceError> =>
  Effect.forEach(steps, (batches, s) =>
    Effect.tryPromise({
      try: () => trainStep(model, optimizer, batches, objective),
      catch: (e) => new DeviceError({ message: `Train: step ${s} failed: ${e instanceof Error ? e.message : String(e)}` })
    }).pipe(
      Effect.uninterruptible,
      Effect.zipLeft(Effect.suspend(() => {
        const failed = gpuFailure(`Train: step ${s}`)
        return failed === undefined ? Effect.void : Effect.fail(failed)
      })),
      Effect.zipLeft(yieldToEventLoop)
    ))
