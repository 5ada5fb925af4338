/**
 * The device actor: the one place that holds the model's weights, runs the generation engine and
 * trains. `workerLayer` runs it in a worker thread of the node, so forward and backward passes
 * never block the node's event loop (the Gateway keeps answering while the device is busy). This
 * module loads no TensorFlow.js: the handlers that do (`handlers.ts`) run in the worker.
 *
 * One process may run two devices (the split schedule: generation on `Device`, training on
 * `TrainingDevice`); both answer the same protocol with the same handlers.
 */
import {
  DeviceRpcs,
  type DeviceWeights,
  type GenerateRequest,
  type PauseMode,
  type RestoreRequest,
  type SaveRequest,
  type ScoreRequest,
  type TrainRequest
} from "@reins/protocol"
import { Actor, type RpcGroup } from "@reins/runtime"
import { Effect } from "effect"
import type { BackendName } from "../backend.js"

/** A device actor: a name answering `DeviceRpcs`. */
export type DeviceActor = Actor.Actor<string, RpcGroup.Rpcs<typeof DeviceRpcs>>

/** The generation device (the Gateway samples from it); in the collocated schedules it also trains. */
export const Device = Actor.make("device", DeviceRpcs)

/** The second device of the split schedule: it trains and sends its weights to `Device`. */
export const TrainingDevice = Actor.make("training-device", DeviceRpcs)

export interface DeviceOptions {
  /** The model directory to serve. */
  readonly modelDir: string
  /** Create the project's default policy in `modelDir` if it holds no model yet. */
  readonly createDefault?: boolean
  /** The id clients send as `model` (default: the directory's name, or `reins-default`). */
  readonly modelId?: string
  readonly backend?: BackendName
  /**
   * Bytes of memory for the KV caches (default: `REINS_KV_CACHE_MB` MiB, else the most the
   * decoder's attention kernels address, wasm32's 4 GiB, or a quarter of the machine's memory
   * where that is less). A smaller memory serves fewer tokens per
   * sequence than the model's context (`DeviceInfo.contextLength` says how many) and fewer
   * sequences at once; requests wait for room.
   */
  readonly kvBytes?: number
  /**
   * Serve only (`reins serve`): the model must fit the backend for serving alone, and where it
   * would not fit for training too, Train and Score fail saying why.
   */
  readonly serveOnly?: boolean
  /** Train LoRA adapters (PEFT's meaning) instead of every weight; plain data, it crosses to the worker. */
  readonly lora?: { readonly rank: number; readonly alpha: number; readonly dropout?: number; readonly targets?: ReadonlyArray<string> }
}

/** What the worker receives: the options plus the name it serves under (for its logs). */
export interface DeviceWorkerData extends DeviceOptions {
  readonly actorName: string
}

/** Runs a device actor (default `Device`) in a worker thread of this node. */
export const workerLayer = (options: DeviceOptions, actor: DeviceActor = Device) =>
  actor.toWorkerLayer({
    // worker.js beside the compiled Device.js; worker.ts when running from the sources (tests)
    entry: new URL(import.meta.url.endsWith(".ts") ? "./worker.ts" : "./worker.js", import.meta.url),
    data: { ...options, actorName: actor.name } satisfies DeviceWorkerData
  })

/**
 * A device seen as a generation engine (the shape the Gateway's `EngineGenerator` adapts) plus
 * the Trainer's calls: every call is a message to the device actor, wherever it runs.
 */
export const deviceClient = (actor: DeviceActor = Device) =>
  Effect.map(actor.client, (device) => ({
    generate: (request: GenerateRequest) => device.Generate(request),
    pause: (mode: PauseMode) => device.Pause({ mode }),
    resume: device.Resume(),
    stats: Effect.map(device.Info(), (info) => ({ version: info.version })),
    info: device.Info(),
    train: (request: TrainRequest) => device.Train(request),
    score: (request: ScoreRequest) => device.Score(request),
    getWeights: device.GetWeights(),
    setWeights: (weights: DeviceWeights) => device.SetWeights(weights),
    save: (request: SaveRequest) => device.Save(request),
    restore: (request: RestoreRequest) => device.Restore(request),
    /** The raw actor ref. */
    device
  }))

export type DeviceClient = Effect.Effect.Success<ReturnType<typeof deviceClient>>

/** The generation device as an engine (see `deviceClient`). */
export const deviceEngine = deviceClient(Device)
