/**
 * What the Gateway needs from a token-level policy engine: sample from prompt ids, pause and
 * resume for a weight update, and say which model and version it serves. The engine runs where
 * the device is (the Trainer's worker); the Gateway reaches it by message, so nothing here
 * touches tensors. `EngineGenerator` adapts the policy engine to this interface.
 */
import type { GenerateChunk, GenerateRequest, PauseMode } from "@reins/protocol"
import { Context, Data, type Effect, type Stream } from "effect"

export interface ModelInfo {
  /** The id clients send as `model`. */
  readonly id: string
  /** Prompt + completion tokens the model can attend to. */
  readonly contextLength: number
  /** The policy version serving new tokens. */
  readonly version: number
  /** Unix seconds, for `/v1/models`. */
  readonly created: number
  /** Completion length when a request sets no `max_tokens` (default: the rest of the context). */
  readonly defaultMaxTokens?: number | undefined
  /** The TensorFlow.js backend the model runs on (`webgpu`, `wasm`, ...), when it is local. */
  readonly backend?: string | undefined
}

/** The engine failed or went away; the call is answered with an error and recorded as such. */
export class GenerateError extends Data.TaggedError("GenerateError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface GeneratorService {
  readonly info: Effect.Effect<ModelInfo>
  /**
   * Streams the sampled tokens; the last chunk carries the `finishReason`. Interrupting the
   * stream cancels the generation. Across an `interrupt` pause the stream just stalls: the
   * engine continues the sequence after resume (its later tokens carry the new version).
   */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, GenerateError>
  /** Frees the device: resolves when no sequence is being computed. */
  readonly pause: (mode: PauseMode) => Effect.Effect<void, GenerateError>
  readonly resume: Effect.Effect<void, GenerateError>
  /** Reads the served version again: the weights were swapped while generation went on (split schedule). */
  readonly refresh: Effect.Effect<ModelInfo>
}

export class Generator extends Context.Tag("@reins/gateway/Generator")<Generator, GeneratorService>() {}
