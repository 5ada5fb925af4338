/**
 * One update: the finished groups of a batch → samples → weights on the device → a new version,
 * and the metrics line that describes it.
 *
 * The batch is built before the Gateway is paused (finished rollouts no longer change), so the
 * pause only covers the update itself. `collocated`/`sync`: pause the Gateway (in-flight
 * generations are interrupted at a token boundary or drained), train on the generation device,
 * resume; held calls continue with the new weights. `split`: generation never stops; the update
 * runs on the training device and its weights are swapped into the generation device after.
 */
import {
  DeviceBusy,
  PauseStats,
  type StalenessStats,
  type TrainerConfig,
  TrainRequest,
  type TrainResult,
  TrainSample,
  TrainSettings,
  type TrainStepStats,
  type VersionMetrics
} from "@reins/protocol"
import { Effect } from "effect"
import { type Batch, batchOptions, buildBatch } from "../batch.js"
import { planUpdate } from "../batching.js"
import { versionMetrics } from "../metrics.js"
import type { Sample } from "../normalization.js"
import { lossSettings, staleness } from "../offpolicy.js"
import { trainedCalls } from "../samples/trained.js"
import { traceOf } from "../samples/trace.js"
import type { DeviceClockReading, RolloutEnded, TrainerError, TrainerPorts } from "./ports.js"

export const trainSettings = (config: TrainerConfig, contextLength: number): TrainSettings =>
  new TrainSettings({
    objective: { kind: "pg", ...lossSettings(config) },
    lr: config.lr,
    weightDecay: config.weight_decay,
    maxGradNorm: config.max_grad_norm,
    ...(config.micro_batch_tokens !== undefined ? { microBatchTokens: config.micro_batch_tokens } : {}),
    maxSeqLen: config.max_seq_len ?? contextLength
  })

/** The device's request for these optimizer steps: samples as packed typed arrays. */
const trainRequest = (steps: ReadonlyArray<ReadonlyArray<Sample>>, settings: TrainSettings) =>
  new TrainRequest({
    steps: steps.map((step) =>
      step.map((s) => new TrainSample({ tokens: s.tokens, weights: s.weights, advantages: s.advantages, behaviorLogprobs: s.behaviorLogprobs }))
    ),
    settings
  })

export interface UpdateInput {
  readonly config: TrainerConfig
  readonly contextLength: number
  /** The version being trained (the policy the update starts from). */
  readonly version: number
  /** The batch's rollouts as they ended: their ids and the final reward each one carries. */
  readonly ended: ReadonlyArray<RolloutEnded>
}

export interface UpdateResult {
  readonly batch: Batch
  readonly staleness: StalenessStats
  readonly pause: PauseStats
  /** null when the batch held nothing trainable (the version does not move). */
  readonly outcome: TrainResult | null
}

const noPause = new PauseStats({ pauseSeconds: 0, drainSeconds: 0, heldCalls: 0 })

/** Builds the batch from the rollouts' traces in the store, with the rewards they ended with. */
const loadBatch = (ports: TrainerPorts, input: UpdateInput) =>
  Effect.map(
    Effect.forEach(input.ended, (e) => Effect.map(ports.records.rollout(e.rolloutId), (record) => traceOf(record, e.reward)), { concurrency: 8 }),
    (traces) => buildBatch(traces, batchOptions(input.config, input.contextLength))
  )

/** Runs `train` with the Gateway paused; resumes whatever happens, and measures the pause. */
const whilePaused = <A>(ports: TrainerPorts, config: TrainerConfig, train: Effect.Effect<A, TrainerError>) =>
  Effect.gen(function*() {
    const started = performance.now()
    const { result, paused, held } = yield* Effect.acquireUseRelease(
      ports.gateway.pause(config.pause),
      (paused) =>
        Effect.gen(function*() {
          const result = yield* train
          // Every call that arrived during the pause is still waiting at the gate right now.
          const held = (yield* ports.gateway.state).held
          return { result, paused, held }
        }),
      () => Effect.ignoreLogged(ports.gateway.resume)
    )
    return {
      result,
      pause: new PauseStats({
        pauseSeconds: (performance.now() - started) / 1000,
        drainSeconds: paused.lastDrainSeconds ?? 0,
        heldCalls: held
      })
    }
  })

export const runUpdate = (ports: TrainerPorts, input: UpdateInput): Effect.Effect<UpdateResult, TrainerError> =>
  Effect.gen(function*() {
    const batch = yield* loadBatch(ports, input)
    const steps = planUpdate(batch.samples, {
      optimizerSteps: input.config.optimizer_steps,
      normalization: input.config.normalization
    })
    const stale = staleness(batch.samples, input.version)
    if (steps.length === 0) return { batch, staleness: stale, pause: noPause, outcome: null }
    // What each call's tokens received, recorded once the version they went into exists.
    const recordTrained = (outcome: TrainResult) => ports.records.recordTrained(trainedCalls(steps.flat(), outcome.version))
    const train = ports.training.train(trainRequest(steps, trainSettings(input.config, input.contextLength)))
    if (input.config.schedule === "split") {
      const outcome = yield* train
      yield* ports.training.sendWeightsTo(ports.generation)
      // No resume tells the Gateway of the new version here: it would go on naming the old one
      // and the store would never record the swap.
      yield* ports.gateway.swapped
      yield* recordTrained(outcome)
      return { batch, staleness: stale, pause: noPause, outcome }
    }
    const { pause, result } = yield* whilePaused(ports, input.config, train)
    yield* recordTrained(result)
    return { batch, staleness: stale, pause, outcome: result }
  })

/** Device busy fractions over a period, from two clock readings (one device, or two in split). */
export const deviceBusy = (
  wallSeconds: number,
  generation: { readonly from: DeviceClockReading; readonly to: DeviceClockReading },
  training: { readonly from: DeviceClockReading; readonly to: DeviceClockReading } | null
): DeviceBusy => {
  if (!(wallSeconds > 0)) return new DeviceBusy({ generating: 0, training: 0, idle: 1 })
  const devices = training === null ? 1 : 2
  const total = wallSeconds * devices
  const gen = Math.max(0, generation.to.generatingSeconds - generation.from.generatingSeconds)
  const trainClock = training ?? generation
  const trained = Math.max(0, trainClock.to.trainingSeconds - trainClock.from.trainingSeconds)
  const g = Math.min(1, gen / total)
  const t = Math.min(1 - g, trained / total)
  return new DeviceBusy({ generating: g, training: t, idle: Math.max(0, 1 - g - t) })
}

/** The metrics line of an update that produced `version`. */
export const updateMetrics = (
  result: UpdateResult & { readonly outcome: TrainResult },
  at: number,
  wallSeconds: number,
  device: DeviceBusy
): VersionMetrics => {
  const steps = result.outcome.steps
  const last = steps[steps.length - 1]
  const train = { seconds: result.outcome.seconds, optimizerSteps: steps.length, ...(last === undefined ? {} : stepRecord(last)) }
  return versionMetrics({
    version: result.outcome.version,
    at,
    wallSeconds,
    batch: result.batch,
    staleness: result.staleness,
    pause: result.pause,
    device,
    train
  })
}

/** The last optimizer step's stats as flat numbers for the metrics line. */
const stepRecord = (s: TrainStepStats): Record<string, number> => ({
  loss: s.loss,
  tokens: s.tokens,
  microBatches: s.microBatches,
  gradNorm: s.gradNorm,
  clipped: s.clipped ? 1 : 0,
  lr: s.lr,
  entropy: s.entropy,
  stepSeconds: s.seconds,
  ...(s.pg ?? {})
})
