/**
 * The device actor's protocol. The device owner holds the model's weights (in a worker thread,
 * so the node's event loop stays free); the Gateway samples through it and the Trainer will
 * update it. Tensors never cross this boundary: only packed token ids and logprobs do.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Schema } from "effect"
import { GenerateChunk, GenerateRequest } from "./Generation.js"
import { PauseMode } from "./Gateway.js"

export class DeviceInfo extends Schema.Class<DeviceInfo>("DeviceInfo")({
  /** The id clients send as `model`. */
  modelId: Schema.String,
  /** The model directory it serves (tokenizer.json and chat_template.jinja are read from it). */
  modelDir: Schema.String,
  contextLength: Schema.Int,
  /** Completion length when a request sets none. */
  defaultMaxTokens: Schema.Int,
  /** The policy version serving new tokens. */
  version: Schema.Int,
  /** The tfjs backend in use (`tensorflow`, `wasm`, `cpu`). */
  backend: Schema.String
}) {}

/** The device could not do what was asked (the model failed to load, the engine failed). */
export class DeviceError extends Schema.TaggedError<DeviceError>()("DeviceError", {
  message: Schema.String
}) {}

export class DeviceRpcs extends RpcGroup.make(
  Rpc.make("Info", { success: DeviceInfo }),
  /** Samples a continuation; the last chunk carries the finish reason. */
  Rpc.make("Generate", { payload: GenerateRequest, success: GenerateChunk, error: DeviceError, stream: true }),
  /** Frees the device (`drain` or `interrupt`); succeeds once no sequence is being computed. */
  Rpc.make("Pause", { payload: { mode: PauseMode }, error: DeviceError }),
  /** Continues interrupted sequences (with the current weights) and admits new ones. */
  Rpc.make("Resume", { error: DeviceError })
) {}
