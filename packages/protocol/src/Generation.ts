/**
 * The generation contract between the Gateway (which renders prompts and records calls) and the
 * policy's engine on the device owner (which samples). Token ids, logprobs and versions are
 * packed typed arrays (see `Packed` in @reins/runtime).
 */
import { Packed } from "@reins/runtime"
import { Schema } from "effect"

export class SamplingParams extends Schema.Class<SamplingParams>("SamplingParams")({
  maxTokens: Schema.Int.pipe(Schema.positive()),
  temperature: Schema.Number.pipe(Schema.between(0, 2)),
  topP: Schema.Number.pipe(Schema.between(0, 1)),
  /** 0 disables top-k. */
  topK: Schema.Int.pipe(Schema.nonNegative()),
  seed: Schema.optional(Schema.Int),
  stop: Schema.Array(Schema.String),
  /** How many alternatives to return per sampled token (0 = none). */
  topLogprobs: Schema.Int.pipe(Schema.between(0, 20))
}) {}

export class GenerateRequest extends Schema.Class<GenerateRequest>("GenerateRequest")({
  requestId: Schema.String,
  promptIds: Packed.Int32,
  params: SamplingParams
}) {}

/**
 * `stop`: EOS or a stop string; `length`: max tokens or context; `tool_calls`: a complete tool
 * call ended the turn; `interrupted`: stopped at a token boundary by a pause (normally continued
 * transparently and never seen by a harness); `cancelled`: the caller went away.
 */
export const FinishReason = Schema.Literal("stop", "length", "tool_calls", "interrupted", "cancelled")
export type FinishReason = typeof FinishReason.Type

/** Tokens sampled since the previous chunk. The last chunk of a generation has a `finishReason`. */
export class GenerateChunk extends Schema.Class<GenerateChunk>("GenerateChunk")({
  outputIds: Packed.Int32,
  /** Log-probability of each sampled token under the policy that sampled it. */
  logprobs: Packed.Float32,
  /** The policy version that sampled each token. */
  versions: Packed.Int32,
  /** Row-major `[tokens × k]` alternatives when `topLogprobs = k > 0`. */
  topIds: Schema.optional(Packed.Int32),
  topLogprobs: Schema.optional(Packed.Float32),
  finishReason: Schema.optional(FinishReason),
  /**
   * With `finishReason: "stop"` from a stop string: the string that matched. The token that
   * completed it is part of `outputIds` (it was sampled); the caller cuts the text.
   */
  matchedStop: Schema.optional(Schema.String)
}) {}
