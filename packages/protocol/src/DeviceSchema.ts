/**
 * The device actor's protocol. The device owner holds the model's weights (in a worker thread,
 * so the node's event loop stays free); the Gateway samples through it and the Trainer updates
 * it. Tensors never cross this boundary as `number[]`: token ids, per-token values and weights
 * travel as packed typed arrays (`Packed.Int32` / `Packed.Float32`).
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Packed } from "@reins/runtime"
import { Schema } from "effect"
import { GenerateChunk, GenerateRequest } from "./Generation.js"
import { PauseMode } from "./GatewaySchema.js"

/** The generation engine's queue right now: what a pause holds, and whether anything may run. */
export class EngineLoad extends Schema.Class<EngineLoad>("EngineLoad")({
  /** Sequences being decoded, requests not admitted yet, and sequences an interrupt holds. */
  running: Schema.Int,
  waiting: Schema.Int,
  held: Schema.Int,
  /** Decode steps and sampled tokens since the device started. */
  steps: Schema.Int,
  generatedTokens: Schema.Int,
  /**
   * The engine has seen every request, pause and weight change so far and has nothing it may
   * run: no step happens until the next one (a paused device with requests held is parked).
   */
  parked: Schema.Boolean
}) {}

export class DeviceInfo extends Schema.Class<DeviceInfo>("DeviceInfo")({
  /** The id clients send as `model`. */
  modelId: Schema.String,
  /** The model directory it serves (tokenizer.json and chat_template.jinja are read from it). */
  modelDir: Schema.String,
  /** Tokens one sequence may hold: the model's context, or less where the KV memory holds less. */
  contextLength: Schema.Int,
  /** Completion length when a request sets none. */
  defaultMaxTokens: Schema.Int,
  /** The policy version serving new tokens. */
  version: Schema.Int,
  /** The tfjs backend in use (`tensorflow`, `webgpu`, `wasm`, `cpu`). */
  backend: Schema.String,
  /** The backend's memory in bytes, as the device sizes micro-batches from it. */
  memoryBytes: Schema.Number,
  /** Padded tokens per training micro-batch at the full context when a `Train` sets none. */
  microBatchTokens: Schema.Int,
  /** Seconds since the device started (its worker loaded the model). */
  uptimeSeconds: Schema.Number,
  /**
   * Cumulative seconds during which at least one sequence was being computed (live generations,
   * not paused, not training). Busy fractions: `generatingSeconds / uptimeSeconds`, etc.
   */
  generatingSeconds: Schema.Number,
  /** Cumulative seconds spent in `Train` (scoring π_old, forward/backward, optimizer steps). */
  trainingSeconds: Schema.Number,
  engine: EngineLoad
}) {}

/** The device could not do what was asked (bad input, the model failed to load, the engine failed). */
export class DeviceError extends Schema.TaggedError<DeviceError>()("DeviceError", {
  message: Schema.String
}) {}

/**
 * A diagnostic number that may be non-finite (a diverged loss): `null` on the wire, `NaN` once
 * decoded (JSON and some msgpack consumers cannot carry NaN / ±Infinity).
 */
export const StatNumber = Schema.transform(Schema.NullOr(Schema.Number), Schema.Number, {
  strict: true,
  decode: (n) => n ?? Number.NaN,
  encode: (n) => (Number.isFinite(n) ? n : null)
})

// -------------------------------------------------------------------------------------------
// Training

/**
 * One training sequence. Every per-token array is aligned with `tokens`: entry i belongs to
 * predicting `tokens[i]` from `tokens[<i]` (entry 0 is never used).
 */
export class TrainSample extends Schema.Class<TrainSample>("TrainSample")({
  tokens: Packed.Int32,
  /** Loss weight per token, already normalized by the Trainer (0 = not trained). */
  weights: Packed.Float32,
  /** Policy gradient: per-token advantage (required by the `pg` objective). */
  advantages: Schema.optional(Packed.Float32),
  /** Policy gradient: logprob of each token under the policy that sampled it (required by `pg`). */
  behaviorLogprobs: Schema.optional(Packed.Float32)
}) {}

/** PPO dual-clip policy gradient with truncated importance sampling (see @reins/policy losses). */
export const PgObjective = Schema.Struct({
  kind: Schema.Literal("pg"),
  clipLow: Schema.Number.pipe(Schema.between(0, 1)),
  clipHigh: Schema.Number.pipe(Schema.nonNegative()),
  dualClip: Schema.Number.pipe(Schema.greaterThan(1)),
  tisCap: Schema.Number.pipe(Schema.positive())
})

/** Token cross-entropy on the weighted tokens. */
export const SftObjective = Schema.Struct({ kind: Schema.Literal("sft") })

export const TrainObjective = Schema.Union(PgObjective, SftObjective)
export type TrainObjective = typeof TrainObjective.Type

export class TrainSettings extends Schema.Class<TrainSettings>("TrainSettings")({
  objective: TrainObjective,
  /** AdamW learning rate for every step of this update. */
  lr: Schema.Number.pipe(Schema.nonNegative()),
  /** AdamW decoupled weight decay (matrices and embeddings only). */
  weightDecay: Schema.Number.pipe(Schema.nonNegative()),
  /** Clip gradients to this global L2 norm (absent: no clipping). */
  maxGradNorm: Schema.optional(Schema.Number.pipe(Schema.positive())),
  /**
   * Token budget (rows × padded length) of one packed forward/backward pass. Absent: the device
   * sizes it from its backend's memory (`DeviceInfo.microBatchTokens` at the full context).
   */
  microBatchTokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** Longest sequence in predictions (tokens − 1); ≤ the model's context. */
  maxSeqLen: Schema.Int.pipe(Schema.positive())
}) {}

export class TrainRequest extends Schema.Class<TrainRequest>("TrainRequest")({
  /**
   * steps × samples: one optimizer step per entry of `steps`. The device packs each step into
   * micro-batches that fit its memory (`settings.microBatchTokens`, else its own) and accumulates gradients
   * over them.
   */
  steps: Schema.Array(Schema.Array(TrainSample)),
  settings: TrainSettings
}) {}

export class PgStepStats extends Schema.Class<PgStepStats>("PgStepStats")({
  /** Fraction of trained tokens whose PPO clip was active. */
  clipFraction: StatNumber,
  /** Fraction of trained negative-advantage tokens held by the dual clip. */
  dualClipFraction: StatNumber,
  /** Mean π/π_old over trained tokens. */
  meanRatio: StatNumber,
  /** Mean truncated importance weight min(π_old/μ, tisCap), and the fraction the cap truncated. */
  meanImportanceWeight: StatNumber,
  truncatedFraction: StatNumber,
  /** Mean log π_old − log π (k1 estimate of KL(π_old‖π)). */
  approxKl: StatNumber
}) {}

export class TrainStepStats extends Schema.Class<TrainStepStats>("TrainStepStats")({
  /** Σ of the weighted loss over the step's micro-batches. */
  loss: StatNumber,
  /** Trained tokens (weight ≠ 0). */
  tokens: Schema.Int,
  /** Packed forward/backward passes run. */
  microBatches: Schema.Int,
  /** Global gradient norm before clipping, and whether it was clipped. */
  gradNorm: StatNumber,
  clipped: Schema.Boolean,
  lr: Schema.Number,
  /** Mean entropy of π over trained tokens. */
  entropy: StatNumber,
  /** PG diagnostics (the `pg` objective only). */
  pg: Schema.optional(PgStepStats),
  seconds: Schema.Number
}) {}

export class TrainResult extends Schema.Class<TrainResult>("TrainResult")({
  /** The version the device serves now (previous + 1). */
  version: Schema.Int,
  steps: Schema.Array(TrainStepStats),
  /** Wall time of the whole call, validation to swap. */
  seconds: Schema.Number
}) {}

// -------------------------------------------------------------------------------------------
// Scoring

export class ScoreRequest extends Schema.Class<ScoreRequest>("ScoreRequest")({
  sequences: Schema.Array(Packed.Int32)
}) {}

export class ScoreResult extends Schema.Class<ScoreResult>("ScoreResult")({
  /** The version of the weights that scored. */
  version: Schema.Int,
  /** Per sequence, aligned with its tokens: log π(tokens[i] | tokens[<i]) at temperature 1; entry 0 is 0. */
  logprobs: Schema.Array(Packed.Float32)
}) {}

// -------------------------------------------------------------------------------------------
// Weights and checkpoints

export class WeightTensor extends Schema.Class<WeightTensor>("WeightTensor")({
  /** Parameter name as in model.safetensors (e.g. `layers.0.attn.wq`). */
  name: Schema.String,
  shape: Schema.Array(Schema.Int.pipe(Schema.nonNegative())),
  data: Packed.Float32
}) {}

/** Every parameter of the model, as one version. */
export class DeviceWeights extends Schema.Class<DeviceWeights>("DeviceWeights")({
  version: Schema.Int.pipe(Schema.nonNegative()),
  tensors: Schema.Array(WeightTensor)
}) {}

export class SaveRequest extends Schema.Class<SaveRequest>("SaveRequest")({
  /** The model directory to write (replaced if it exists). */
  dir: Schema.String,
  /** Also write optimizer.safetensors (AdamW moments and step), if the device has trained. */
  optimizer: Schema.Boolean
}) {}

export class SaveResult extends Schema.Class<SaveResult>("SaveResult")({
  /** Absolute path of the directory written. */
  dir: Schema.String,
  version: Schema.Int,
  /** Whether optimizer.safetensors was written. */
  optimizer: Schema.Boolean
}) {}

export class RestoreRequest extends Schema.Class<RestoreRequest>("RestoreRequest")({
  dir: Schema.String,
  /** The version to serve (default: the one recorded in the directory). */
  version: Schema.optional(Schema.Int.pipe(Schema.nonNegative()))
}) {}

export class RestoreResult extends Schema.Class<RestoreResult>("RestoreResult")({
  version: Schema.Int,
  /** Whether optimizer state was found and loaded (otherwise the optimizer starts fresh). */
  optimizer: Schema.Boolean
}) {}

export class DeviceRpcs extends RpcGroup.make(
  Rpc.make("Info", { success: DeviceInfo }),
  /** Samples a continuation; the last chunk carries the finish reason. */
  Rpc.make("Generate", { payload: GenerateRequest, success: GenerateChunk, error: DeviceError, stream: true }),
  /** Frees the device (`drain` or `interrupt`); succeeds once no sequence is being computed. */
  Rpc.make("Pause", { payload: { mode: PauseMode }, error: DeviceError }),
  /** Continues interrupted sequences (with the current weights) and admits new ones. */
  Rpc.make("Resume", { error: DeviceError }),
  /**
   * One update: an AdamW step per entry of `steps` (packed into micro-batches here), then the new weights serve as version + 1.
   * A paused engine stays paused (the caller resumes); a running one is interrupted for the swap
   * and resumed. On failure nothing changes.
   */
  Rpc.make("Train", { payload: TrainRequest, success: TrainResult, error: DeviceError }),
  /** Per-token logprobs of sequences under the current weights (temperature 1). */
  Rpc.make("Score", { payload: ScoreRequest, success: ScoreResult, error: DeviceError }),
  /** A copy of every parameter and the version they are. */
  Rpc.make("GetWeights", { success: DeviceWeights, error: DeviceError }),
  /** Swaps in new weights (a brief interrupt of generation, not a drain) and serves their version. */
  Rpc.make("SetWeights", { payload: DeviceWeights, error: DeviceError }),
  /** Writes a complete model directory (+ optimizer state), atomically. */
  Rpc.make("Save", { payload: SaveRequest, success: SaveResult, error: DeviceError }),
  /** Loads weights (+ optimizer state when present) from a model directory and serves them. */
  Rpc.make("Restore", { payload: RestoreRequest, success: RestoreResult, error: DeviceError })
) {}
