/** The device actor's handlers, run in its worker thread: load the model, start the engine. */
import { DeviceError, DeviceInfo, type PauseMode } from "@reins/protocol"
import { Effect, Stream } from "effect"
import path from "node:path"
import { initBackend } from "../backend.js"
import { loadModelDir, type ModelDir } from "../checkpoint/modelDir.js"
import { makeEngine } from "../engine/engine.js"
import { Transformer } from "../model/transformer.js"
import { DEFAULT_MODEL_ID, ensureDefaultPolicy } from "./defaultPolicy.js"
import { Device, type DeviceOptions } from "./Device.js"

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
