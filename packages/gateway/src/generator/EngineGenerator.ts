/**
 * `Generator` over the policy's generation engine. Thin on purpose: the engine already streams
 * `GenerateChunk`s, pauses and resumes; this only names the model and turns an engine that ends
 * a generation on its own (`interrupted` at shutdown, `cancelled`) into an error, so such a call
 * is never recorded as a normal completion.
 *
 * The engine is described structurally (`EngineLike`), so the Gateway never depends on the
 * model code: in-process for `reins serve` and tests, or a client of the device actor when the
 * engine runs in the Trainer's worker.
 */
import type { GenerateChunk, GenerateRequest, PauseMode } from "@reins/protocol"
import { Effect, Layer, Stream } from "effect"
import { GenerateError, Generator, type GeneratorService, type ModelInfo } from "./Generator.js"

export interface EngineLike {
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, { readonly message: string }>
  readonly pause: (mode: PauseMode) => Effect.Effect<unknown, { readonly message: string }>
  readonly resume: Effect.Effect<void, { readonly message: string }>
  /** `version`: the policy version of the weights serving new tokens. */
  readonly stats: Effect.Effect<{ readonly version: number }, { readonly message: string }>
}

/** The model as `ModelInfo` names it, less the version the engine reports; `created` (Unix seconds) defaults to now. */
export type EngineModel = Omit<ModelInfo, "version" | "created"> & { readonly created?: number | undefined }

const generateError = (e: { readonly message: string }) => new GenerateError({ message: e.message, cause: e })

export const fromEngine = (engine: EngineLike, model: EngineModel): GeneratorService => {
  const created = model.created ?? Math.floor(Date.now() / 1000)
  // The version changes while the device is paused (the Trainer updates the weights between pause
  // and resume) or in a weight swap (split schedule), so it is read once, again after every
  // resume or swap, and raised when a token comes stamped with a newer one: not once per call,
  // which is a message round trip when the engine runs in the device's worker thread.
  let cached: ModelInfo | undefined
  const refresh = Effect.map(Effect.orDie(engine.stats), (s): ModelInfo => {
    cached = {
      id: model.id,
      contextLength: model.contextLength,
      version: s.version,
      created,
      defaultMaxTokens: model.defaultMaxTokens,
      backend: model.backend
    }
    return cached
  })
  return {
    info: Effect.suspend(() => (cached !== undefined ? Effect.succeed(cached) : refresh)),
    generate: (request) =>
      engine.generate(request).pipe(
        Stream.mapError(generateError),
        Stream.mapEffect((chunk) => {
          if (chunk.finishReason === "interrupted" || chunk.finishReason === "cancelled") {
            return Effect.fail(new GenerateError({ message: `the engine ended the generation (${chunk.finishReason})` }))
          }
          const newest = chunk.versions.length > 0 ? chunk.versions[chunk.versions.length - 1]! : -1
          if (cached !== undefined && newest > cached.version) cached = { ...cached, version: newest }
          return Effect.succeed(chunk)
        })
      ),
    pause: (mode) => Effect.asVoid(Effect.mapError(engine.pause(mode), generateError)),
    resume: Effect.zipLeft(Effect.mapError(engine.resume, generateError), refresh),
    refresh
  }
}

/** `Generator` from an engine service. */
export const layer = <I>(engine: Effect.Effect<EngineLike, never, I>, model: EngineModel): Layer.Layer<Generator, never, I> =>
  Layer.effect(Generator, Effect.map(engine, (e) => fromEngine(e, model)))
