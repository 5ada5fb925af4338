/**
 * The device actor: the one place that holds the model's weights and runs the generation engine.
 * `Device.workerLayer` runs it in a worker thread of the node, so forward passes never block the
 * node's event loop (the Gateway keeps answering while the device is busy).
 */
import { DeviceError, DeviceInfo, DeviceRpcs, type GenerateRequest, type PauseMode } from "@reins/protocol"
import { Actor } from "@reins/runtime"
import { Effect, Stream } from "effect"
import path from "node:path"
import { loadModelDir, type ModelDir } from "../checkpoint/modelDir.js"
import { initBackend, type BackendName } from "../backend.js"
import { makeEngine } from "../engine/engine.js"
import { Transformer } from "../model/transformer.js"
import { DEFAULT_MODEL_ID, ensureDefaultPolicy } from "./defaultPolicy.js"

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

const deviceError = (e: { readonly message: string }) => new DeviceError({ message: e.message })

const loadPolicy = (options: DeviceOptions): Effect.Effect<ModelDir, DeviceError> =>
  (options.createDefault ? ensureDefaultPolicy(options.modelDir) : loadModelDir(options.modelDir)).pipe(
    Effect.mapError(deviceError)
  )

/** The device's handlers: loads the model, starts the engine, serves it until the scope closes. */
export const deviceHandlers = (options: DeviceOptions) =>
  Effect.gen(function*() {
    const backend = yield* Effect.tryPromise({
      try: () => initBackend(options.backend),
      catch: (e) => new DeviceError({ message: `no TensorFlow.js backend: ${String(e)}` })
    })
    const policy = yield* loadPolicy(options)
    const model = Transformer.fromWeights(policy.config, policy.weights)
    const engine = yield* makeEngine({ model, tokenizer: policy.tokenizer, stopIds: policy.generationConfig.eosTokenIds })
    const modelId = options.modelId ??
      (options.createDefault ? DEFAULT_MODEL_ID : path.basename(path.resolve(options.modelDir)))
    return Device.of({
      Info: () =>
        Effect.map(engine.stats, (stats) =>
          new DeviceInfo({
            modelId,
            modelDir: path.resolve(options.modelDir),
            contextLength: policy.config.contextLength,
            defaultMaxTokens: policy.generationConfig.maxNewTokens,
            version: stats.version,
            backend
          })),
      Generate: (request) => Stream.mapError(engine.generate(request), deviceError),
      Pause: ({ mode }: { readonly mode: PauseMode }) => Effect.asVoid(engine.pause(mode)),
      Resume: () => engine.resume
    })
  })

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
