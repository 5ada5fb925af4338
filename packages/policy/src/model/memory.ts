/**
 * Whether a model fits the wasm backend's heap, decided from its config alone — before any
 * weight is read, so a checkpoint too large for it fails in a second with a message saying what
 * it needs, not minutes later with an allocation error.
 *
 * The wasm heap holds the weights about twice while training: the variables, and XNNPACK's
 * packed copy of every matrix it multiplies by (the engine's decoding snapshot shares the
 * variables' memory, but fuses q/k/v into a copy and, with LoRA, holds the merged matrices);
 * for full fine-tuning also a gradient and AdamW's two moments per weight. With LoRA only the
 * adapters have gradients and moments, so that figure (`servingBytes`) stands. Where the packed
 * copies would not fit (`wasmPacksWeights`), serving and LoRA training multiply the weights in
 * place instead (gemmKernel.ts): the variables once (`inPlaceServingBytes`; held [out, in], a
 * tied head is the embedding itself, and the snapshot shares every matrix and keeps the
 * adapters unmerged). Activations and KV caches (in the decoder's own wasm memory) come on top,
 * so the estimate is a lower bound.
 */
import { type ModelConfig, parameterCount } from "./config.js"

/** wasm32's addressable heap. */
export const WASM_HEAP_BYTES = 4 * 1024 ** 3

const GIB = 1024 ** 3

/** The packed copies are used while the weights and they take at most three quarters of the heap (the rest for activations). */
const PACKED_LIMIT_BYTES = WASM_HEAP_BYTES * 0.75

export interface MemoryNeed {
  readonly parameters: number
  /** Serving and LoRA training: the weights and XNNPACK's packed copies. */
  readonly servingBytes: number
  /** Serving, and LoRA training, with products in place (gemmKernel.ts). */
  readonly inPlaceServingBytes: number
  /** What serving and LoRA training hold of the weights: with packed copies where they fit (`wasmPacksWeights`), else in place. */
  readonly loraTrainingBytes: number
  readonly fullTrainingBytes: number
  /** Full training's rollback point kept on the device (device/rollback.ts): the weights and both moments before the update. */
  readonly rollbackBytes: number
}

export const memoryNeed = (config: ModelConfig): MemoryNeed => {
  const parameters = parameterCount(config)
  const servingBytes = parameters * 4 * 2
  const inPlaceServingBytes = parameters * 4
  return {
    parameters,
    servingBytes,
    inPlaceServingBytes,
    loraTrainingBytes: servingBytes <= PACKED_LIMIT_BYTES ? servingBytes : inPlaceServingBytes,
    fullTrainingBytes: parameters * 4 * 5,
    rollbackBytes: parameters * 4 * 3
  }
}

/**
 * Whether the decoder multiplies with tfjs's matmul (XNNPACK, faster, packed copies of the
 * weights): when those copies fit in three quarters of the heap, leaving the rest for the
 * activations. Otherwise it multiplies in place (gemmKernel.ts).
 */
export const wasmPacksWeights = (config: ModelConfig): boolean => memoryNeed(config).servingBytes <= PACKED_LIMIT_BYTES

const gib = (b: number) => (b >= 0.1 * GIB ? `${(b / GIB).toFixed(1)} GiB` : `${(b / 1024 ** 2).toFixed(1)} MiB`)

/** The heap the wasm backend may use, in words (and the variable that lowered it, if one did). */
const heapName = (heapBytes: number) =>
  heapBytes === WASM_HEAP_BYTES ? `the wasm backend's ${gib(WASM_HEAP_BYTES)} heap` : `the ${gib(heapBytes)} the wasm backend may use (REINS_DEVICE_MEMORY_MB)`

/**
 * The reason `config` cannot run on the wasm backend, or undefined when it fits: for serving
 * alone (`serveOnly`: the weights must fit), for serving and training LoRA adapters (the weights
 * in three quarters of the heap, leaving the rest for a micro-batch's activations), or for
 * training every weight. `heapBytes`: what the backend may use (`REINS_DEVICE_MEMORY_MB` can lower
 * it; default and most, the whole heap).
 */
export const wasmMisfit = (
  config: ModelConfig,
  options: { readonly lora: boolean; readonly serveOnly?: boolean; readonly heapBytes?: number }
): string | undefined => {
  const need = memoryNeed(config)
  const heapBytes = Math.min(options.heapBytes ?? WASM_HEAP_BYTES, WASM_HEAP_BYTES)
  const [bytes, limit] = options.serveOnly === true
    ? [need.inPlaceServingBytes, heapBytes]
    : options.lora
    ? [need.loraTrainingBytes, heapBytes * 0.75]
    : [need.fullTrainingBytes, heapBytes]
  if (bytes <= limit) return undefined
  const heap = heapName(heapBytes)
  const what = options.serveOnly === true
    ? `serving it needs at least ${gib(bytes)} of ${heap}`
    : options.lora
    ? `serving it while training LoRA adapters needs ${gib(bytes)} for the weights alone, more than the ${gib(limit)} of ${heap} that leave room for a micro-batch`
    : `training all its weights (serving alone: ${gib(need.inPlaceServingBytes)}) needs at least ${gib(bytes)} of ${heap}`
  return (
    `the model has ${(need.parameters / 1e6).toFixed(0)}M parameters: ${what}. ` +
    `Use the tensorflow backend (REINS_BACKEND=tensorflow with @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node installed), which is not bound by that heap${options.lora || options.serveOnly === true ? "" : ", or train LoRA adapters (trainer.lora)"}`
  )
}

/**
 * Peak bytes one token of a training micro-batch adds (forward and backward, F32), for rows of
 * `seqLen`: per layer about eight activations of the model's width and eight of its MLP's (saved
 * inputs, SwiGLU's gate/up/product and their gradients), one layer's attention scores and their
 * gradient (heads × seqLen each), and about six vocabulary-wide rows (the one-hot embedding
 * input, logits, log-softmax, one-hot targets and the logits' gradient) — none with the head
 * fused with the log-softmax (`fusedHead`, headLogprobs.ts: LoRA with products in place), which
 * keeps a vector of the model's width per token instead. Calibrated against `tf.profile`'s peak
 * on the wasm backend: an upper bound by 1.2–2× over the shapes in
 * test/policy/backend-memory.test.ts, which checks it.
 */
export const trainingBytesPerToken = (config: ModelConfig, seqLen: number, options: { readonly fusedHead?: boolean } = {}): number =>
  4 * (config.nLayers * 8 * (config.dModel + config.dFf) + 2 * config.nHeads * seqLen + (options.fusedHead === true ? 0 : 6 * config.vocabSize) + 8 * config.dModel)

/** The largest tensor of a micro-batch, per token: the logits (or one layer's attention scores). */
const largestTensorBytesPerToken = (config: ModelConfig, seqLen: number): number => 4 * Math.max(config.vocabSize, config.nHeads * seqLen)

export interface MicroBatchFit {
  /** Padded tokens (rows × row length) per micro-batch; at least one row of `seqLen`. */
  readonly tokens: number
  /** What bounds it: the memory left after the weights, one tensor's size limit, or the backend's speed. */
  readonly boundBy: "memory" | "tensor size" | "speed"
  /** Memory it left for activations (after the weights and, for full training, the optimizer). */
  readonly activationBytes: number
}

/**
 * How a micro-batch trains: rows of `seqLen`; LoRA or every weight; LoRA's base multiplied in
 * place (`Transformer.products` "heap"); the update's rollback point kept on the device beside it
 * (`rollbackFitsOnDevice`; a LoRA point is too small to count).
 */
export interface TrainingShape {
  readonly seqLen: number
  readonly lora: boolean
  readonly inPlace?: boolean | undefined
  readonly rollbackOnDevice?: boolean | undefined
}

/** A micro-batch's memory by the estimate: the weights as training holds them, and bytes per padded token. */
const trainingFootprint = (config: ModelConfig, shape: TrainingShape) => {
  const need = memoryNeed(config)
  const inPlace = shape.lora && shape.inPlace === true
  return {
    weights: inPlace ? need.inPlaceServingBytes : shape.lora ? need.servingBytes : need.fullTrainingBytes + (shape.rollbackOnDevice === true ? need.rollbackBytes : 0),
    perToken: trainingBytesPerToken(config, shape.seqLen, { fusedHead: inPlace })
  }
}

/**
 * How many tokens one training micro-batch may hold on a backend with `memoryBytes` (of which
 * three quarters are planned for: the estimate is a bound, not a promise), where no tensor may
 * exceed `maxTensorBytes` (WebGPU's storage-buffer binding limit) and more than `speedTokens` is
 * no faster (wasm and CPUs: within 5% from 1k to 4k tokens, slower beyond; `npm run bench -- micro-batch`). Never less than
 * one row: a row that does not fit is still tried (on wasm, refused first where the heap would not
 * hold it at all: `wasmMicroBatchMisfit`), and elsewhere fails with the backend's own error.
 */
export const fitMicroBatchTokens = (
  config: ModelConfig,
  options: TrainingShape & {
    readonly memoryBytes: number
    readonly maxTensorBytes?: number | undefined
    readonly speedTokens?: number | undefined
  }
): MicroBatchFit => {
  const { weights, perToken } = trainingFootprint(config, options)
  const activationBytes = Math.max(0, Math.floor(options.memoryBytes * 0.75) - weights)
  const candidates: Array<[number, MicroBatchFit["boundBy"]]> = [[Math.floor(activationBytes / perToken), "memory"]]
  if (options.maxTensorBytes !== undefined) {
    candidates.push([Math.floor(options.maxTensorBytes / largestTensorBytesPerToken(config, options.seqLen)), "tensor size"])
  }
  if (options.speedTokens !== undefined) candidates.push([options.speedTokens, "speed"])
  const [tokens, boundBy] = candidates.reduce((a, b) => (b[0] < a[0] ? b : a))
  return { tokens: Math.max(options.seqLen, tokens), boundBy, activationBytes }
}

/**
 * Whether an update's rollback point may be kept on the device (device/rollback.ts): with the
 * values it keeps counted, the budget still holds a micro-batch of `tokens` (default: one row of
 * `seqLen`). Always for LoRA, whose point is the adapters'. Not for a model trained whole that
 * nearly fills its memory (SmolLM2-135M on wasm's 4 GiB heap): its point is copied out to the host.
 */
export const rollbackFitsOnDevice = (
  config: ModelConfig,
  options: TrainingShape & { readonly memoryBytes: number; readonly tokens?: number | undefined }
): boolean => {
  if (options.lora) return true
  const kept = { ...options, rollbackOnDevice: true }
  return fitMicroBatchTokens(config, kept).activationBytes >= trainingFootprint(config, kept).perToken * Math.max(options.seqLen, options.tokens ?? 0)
}

/**
 * The share of the wasm heap a training step's tensors can have. The rest holds what tfjs's
 * accounting does not see (the module's own data, the allocator's overhead and fragmentation):
 * Qwen3-0.6B's LoRA steps on rows of 256 and 272 tokens peaked at 3.95 and 4.00 GB of tensors
 * (`tf.profile`) and ran; a 296-token row, ~4.09 GB at the same rate, ran out of the 4.29 GB heap.
 * 93% of it allows rows of 264 tokens there.
 */
export const WASM_TENSOR_SHARE = 0.93

/**
 * The longest single row that fits `bytes` by the estimate, a multiple of 8 (rows are padded to
 * that: train/microbatch.ts); 0 if none does. Counted up: the per-token bytes grow with the row
 * (its attention scores).
 */
const longestRow = (config: ModelConfig, shape: TrainingShape, bytes: number): number => {
  const fits = (n: number) => {
    const { weights, perToken } = trainingFootprint(config, { ...shape, seqLen: n })
    return weights + perToken * n <= bytes
  }
  let n = 0
  while (fits(n + 8)) n += 8
  return n
}

/**
 * The reason a micro-batch of `rows` rows of `seqLen` must not train on the wasm backend, or
 * undefined: its activations by the estimate do not fit beside the weights in the share of the
 * heap (`heapBytes`, as in `wasmMisfit`) tensors can use. Running out of that heap ends the wasm
 * module — the backend, serving included, is gone for the process's life — so such a micro-batch
 * is refused before it runs. The fit plans in three quarters of the heap but never goes below one
 * row, so this is a row too long for the model: Qwen3-0.6B (LoRA, in place) trains rows of up to
 * 264 tokens (its estimate is within 1% of the measured peak at 256 and 272).
 */
export const wasmMicroBatchMisfit = (config: ModelConfig, rows: number, shape: TrainingShape & { readonly heapBytes?: number }): string | undefined => {
  const { weights, perToken } = trainingFootprint(config, shape)
  const heapBytes = Math.min(shape.heapBytes ?? WASM_HEAP_BYTES, WASM_HEAP_BYTES)
  const usable = heapBytes * WASM_TENSOR_SHARE
  const activations = perToken * rows * shape.seqLen
  if (weights + activations <= usable) return undefined
  const longest = longestRow(config, shape, usable)
  return (
    `a micro-batch of ${rows} × ${shape.seqLen} tokens needs about ${gib(weights + activations)} (${gib(weights)} of weights, ${gib(activations)} of activations by the estimate), ` +
    `more than the ${gib(usable)} tensors can use of ${heapName(heapBytes)}; running out of it would end the wasm backend. ` +
    (longest > 0 ? `Train rows of at most ${longest} tokens here (the trainer's max_seq_len), or use` : "Not even a row of 8 tokens fits: use") +
    ` the tensorflow backend (REINS_BACKEND=tensorflow), which is not bound by that heap`
  )
}
