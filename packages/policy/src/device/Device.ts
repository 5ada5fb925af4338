/**
 * The device actor: the one place that holds the model's weights and runs the generation engine.
 * `Device.workerLayer` runs it in a worker thread of the node, so forward passes never block the
 * node's event loop (the Gateway keeps answering while the device is busy). This module loads no
 * TensorFlow.js: the handlers that do (`handlers.ts`) run in the worker.
 */
import { DeviceRpcs, type GenerateRequest, type PauseMode } from "@reins/protocol"
import { Actor } from "@reins/runtime"
import { Effect } from "effect"
import type { BackendName } from "../backend.js"

export const Device = Actor.make("device", DeviceRpcs)

export interface DeviceOptions {
  /** The model directory to serve. */
  readonly modelDir: string
  /** Create the project's default policy in `modelDir` if it holds no model yet. */
  readonly createDefault?: boolean
  /** The id clients send as `model` (default: the directory's name, or `reins-default`). */
  readonly modelId?: string
  readonly backend?: BackendName
}

/** Runs the device actor in a worker thread of this node. */
export const workerLayer = (options: DeviceOptions) =>
  Device.toWorkerLayer({ entry: new URL("./worker.ts", import.meta.url), data: options })

/**
 * The device seen as a generation engine (the shape the Gateway's `EngineGenerator` adapts):
 * every call is a message to the device actor, wherever it runs.
 */
export const deviceEngine = Effect.map(Device.client, (device) => ({
  generate: (request: GenerateRequest) => device.Generate(request),
  pause: (mode: PauseMode) => device.Pause({ mode }),
  resume: device.Resume(),
  stats: Effect.map(device.Info(), (info) => ({ version: info.version })),
  info: device.Info()
}))
