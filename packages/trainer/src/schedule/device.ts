/**
 * The device actor (`@reins/policy/device`, wherever it runs) as the Trainer's `DevicePort`:
 * samples travel as packed typed arrays, stats come back per optimizer step.
 */
import { type DeviceActor, deviceClient, type DeviceClient } from "@reins/policy/device"
import { RestoreRequest, SaveRequest, TrainRequest, TrainSample, TrainSettings as WireSettings, type TrainStepStats } from "@reins/protocol"
import type { ActorSystem } from "@reins/runtime"
import { Effect } from "effect"
import type { Sample } from "../normalization.js"
import { type DevicePort, trainerError, type TrainSettings } from "./ports.js"

const toSample = (s: Sample) =>
  new TrainSample({ tokens: s.tokens, weights: s.weights, advantages: s.advantages, behaviorLogprobs: s.behaviorLogprobs })

const toRequest = (steps: ReadonlyArray<ReadonlyArray<Sample>>, settings: TrainSettings) =>
  new TrainRequest({
    steps: steps.map((step) => step.map(toSample)),
    settings: new WireSettings({
      objective: { kind: "pg", clipLow: settings.clipLow, clipHigh: settings.clipHigh, dualClip: settings.dualClip, tisCap: settings.tisCap },
      lr: settings.lr,
      weightDecay: settings.weightDecay,
      maxGradNorm: settings.maxGradNorm,
      microBatchTokens: settings.microBatchTokens,
      maxSeqLen: settings.maxSeqLen
    })
  })

/** One optimizer step's stats as a flat record for the metrics line. */
export const stepRecord = (s: TrainStepStats): Record<string, number> => ({
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

/** The Trainer's view of a device actor. */
export const devicePort = (actor?: DeviceActor): Effect.Effect<DevicePort, never, ActorSystem> =>
  Effect.map(deviceClient(actor), (device) => {
    const port: DevicePort = {
      info: Effect.mapError(device.info, trainerError("device info")),
      clock: device.info.pipe(
        Effect.map((i) => ({ version: i.version, generatingSeconds: i.generatingSeconds, trainingSeconds: i.trainingSeconds })),
        Effect.mapError(trainerError("device info"))
      ),
      train: (steps, settings) =>
        device.train(toRequest(steps, settings)).pipe(
          Effect.map((r) => ({ version: r.version, steps: r.steps.map(stepRecord), seconds: r.seconds })),
          Effect.mapError(trainerError("train"))
        ),
      sendWeightsTo: (target) =>
        device.getWeights.pipe(
          Effect.flatMap((weights) => (target as InternalPort).setWeights(weights)),
          Effect.mapError(trainerError("send weights"))
        ),
      save: (dir) => Effect.asVoid(device.save(new SaveRequest({ dir, optimizer: true }))).pipe(Effect.mapError(trainerError("save checkpoint"))),
      restore: (dir, version) =>
        Effect.asVoid(device.restore(new RestoreRequest({ dir, version }))).pipe(Effect.mapError(trainerError("restore checkpoint")))
    }
    const internal: InternalPort = { ...port, setWeights: device.setWeights }
    return internal
  })

/** The weight swap needs the target's raw client; ports made here carry it. */
interface InternalPort extends DevicePort {
  readonly setWeights: DeviceClient["setWeights"]
}
