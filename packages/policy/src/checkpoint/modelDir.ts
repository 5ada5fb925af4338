/**
 * A model directory is a Hugging Face one, in and out (checkpoint/hf/):
 *
 *   config.json               `architectures` (Llama, Mistral, Qwen2, Qwen3), the standard keys
 *                             and the policy version (`reins_policy_version`)
 *   model.safetensors         weights in the checkpoint's dtype, Hugging Face names and [out, in]
 *                             layout (or shards with model.safetensors.index.json)
 *   tokenizer.json            the tokenizer (tokenizer module)
 *   chat_template.jinja       the chat template (chat module); a Hugging Face model's may be
 *                             in tokenizer_config.json instead (chat/PromptTemplateFiles.ts)
 *   generation_config.json    stop ids and default sampling settings
 *   optimizer.safetensors     optional: AdamW moments and step, to resume training
 *
 * Saving writes every file to a temporary name and renames it into place, config.json last.
 * Loading reads and validates everything (shapes, checksums, the version recorded in both
 * config.json and model.safetensors, vocabulary sizes) before anything is built, so a corrupt or
 * truncated file fails with a `CheckpointError` naming the file, never a half-loaded model.
 */
import * as tf from "@tensorflow/tfjs"
import { Data, Effect, Schema } from "effect"
import { existsSync } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { ChatTemplate } from "../chat/ChatTemplate.js"
import type { PromptTemplate } from "../chat/PromptTemplate.js"
import { loadPromptTemplate, savePromptTemplate } from "../chat/PromptTemplateFiles.js"
import { type ModelConfig, parameterShapes } from "../model/config.js"
import { defaultProducts, layoutOf, type MatrixLayout } from "../model/matrixLayout.js"
import { Transformer } from "../model/transformer.js"
import { checkWeights, type Weights } from "../model/weights.js"
import type { OptimizerState } from "../train/optimizer.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { loadTokenizer, saveTokenizer, writeFileAtomic } from "../tokenizer/TokenizerFiles.js"
import { mergeAdapters } from "../model/lora.js"
import { isWasm, reserveHeap, uninitialized, view } from "../model/heap.js"
import { HeapTransposer } from "../model/transposeKernel.js"
import { decodeHfConfig, type HfModelConfig } from "./hf/config.js"
import { asHfModel, hfModelFiles, isHfConfig, STALE_SHARD_INDEX } from "./hf/hfModel.js"
import { ADAPTER_CONFIG_FILE, readPeftAdapter } from "./hf/peft.js"
import { arraySink, HfWeightsError, readHfParameters, type WeightSink } from "./hf/weights.js"
import { decodeSafetensors, encodeSafetensors, type TensorEntry } from "./safetensors.js"

/** config.json of the format reins used before its models became Hugging Face ones. */
const RETIRED_FORMAT = "reins-gpt"

export const CONFIG_FILE = "config.json"
export const WEIGHTS_FILE = "model.safetensors"
export const GENERATION_CONFIG_FILE = "generation_config.json"
export const OPTIMIZER_FILE = "optimizer.safetensors"

/** A file of a model directory that cannot be read, parsed or trusted. */
export class CheckpointError extends Data.TaggedError("CheckpointError")<{
  readonly file: string
  readonly message: string
  readonly cause?: unknown
}> {}

const field = <A, I>(schema: Schema.Schema<A, I>, key: string) => Schema.propertySignature(schema).pipe(Schema.fromKey(key))
const withDefault = <A, I>(schema: Schema.Schema<A, I>, key: string, value: NoInfer<A>) =>
  Schema.optionalWith(schema, { default: () => value }).pipe(Schema.fromKey(key))

/** `generation_config.json`: stop ids and the defaults a request does not set. */
export class GenerationConfig extends Schema.Class<GenerationConfig>("GenerationConfig")({
  eosTokenIds: field(Schema.Array(Schema.Int.pipe(Schema.nonNegative())), "eos_token_id"),
  temperature: withDefault(Schema.Number.pipe(Schema.between(0, 2)), "temperature", 1),
  topP: withDefault(Schema.Number.pipe(Schema.between(0, 1)), "top_p", 1),
  topK: withDefault(Schema.Int.pipe(Schema.nonNegative()), "top_k", 0),
  maxNewTokens: withDefault(Schema.Int.pipe(Schema.positive()), "max_new_tokens", 256)
}) {
  static forTokenizer(tokenizer: Tokenizer): GenerationConfig {
    return GenerationConfig.withEos(tokenizer.stopIds)
  }

  /** These stop ids and the default sampling settings. */
  static withEos(ids: ReadonlyArray<number>): GenerationConfig {
    return new GenerationConfig({ eosTokenIds: [...ids], temperature: 1, topP: 1, topK: 0, maxNewTokens: 256 })
  }
}

/** Everything a model directory holds (the optimizer state is separate). */
export interface ModelDir {
  readonly config: ModelConfig
  readonly weights: Weights
  readonly tokenizer: Tokenizer
  readonly chatTemplate: PromptTemplate
  readonly generationConfig: GenerationConfig
  /** A Hugging Face model's config.json facts (saved back in its layout and dtype). */
  readonly hf?: HfModelConfig | undefined
}

export type { OptimizerState }

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const fail = (file: string, message: string, cause?: unknown) => new CheckpointError({ file, message: `${file}: ${message}`, cause })

/** Another module's error (its message already names the file) as a `CheckpointError` of `file`. */
const inFile = (file: string) => (e: { readonly message: string }) => new CheckpointError({ file, message: e.message, cause: e })

const readJson = (file: string) =>
  Effect.tryPromise({ try: () => fs.readFile(file, "utf8"), catch: (e) => fail(file, `cannot read (${reason(e)})`, e) }).pipe(
    Effect.flatMap((text) => Effect.try({ try: () => JSON.parse(text) as unknown, catch: (e) => fail(file, `invalid JSON (${reason(e)})`, e) }))
  )

const write = (file: string, data: string | Uint8Array) =>
  Effect.tryPromise({
    try: () => writeFileAtomic(file, data),
    catch: (e) => fail(file, `cannot write (${reason(e)})`, e)
  })

/**
 * Loads and validates a whole model directory — or a LoRA checkpoint (a PEFT adapter directory
 * without config.json): its base model, named by `base_model_name_or_path`, with the adapter
 * merged in, at the adapter's policy version.
 */
export const loadModelDir = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.suspend(() => (isAdapterDir(dir) ? loadAdapterDir(dir) : loadFullModelDir(dir, arraySink)))

/** A LoRA checkpoint: a PEFT adapter directory without config.json. */
const isAdapterDir = (dir: string): boolean => existsSync(path.join(dir, ADAPTER_CONFIG_FILE)) && !existsSync(path.join(dir, CONFIG_FILE))

/** The model's config alone (of a LoRA checkpoint: its base's), without reading any weight. */
export const readModelConfig = (dir: string): Effect.Effect<ModelConfig, CheckpointError> =>
  Effect.gen(function* () {
    if (isAdapterDir(dir)) return yield* readModelConfig((yield* readAdapterConfig(dir)).baseDir)
    const file = path.join(dir, CONFIG_FILE)
    const json = yield* readJson(file)
    yield* requireHfConfig(file, json)
    return yield* Effect.try({ try: () => decodeHfConfig(json).config, catch: (e) => fail(file, reason(e), e) })
  })

/** A LoRA checkpoint's adapter_config.json, and the base model's directory it names. */
export const readAdapterConfig = (dir: string) =>
  Effect.gen(function* () {
    const file = path.join(dir, ADAPTER_CONFIG_FILE)
    const raw = (yield* readJson(file)) as Record<string, unknown>
    const baseName = raw?.["base_model_name_or_path"]
    if (typeof baseName !== "string" || baseName === "") return yield* fail(file, "base_model_name_or_path does not name the base model's directory")
    return { file, raw, baseDir: path.resolve(dir, baseName) }
  })

const loadAdapterDir = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.gen(function* () {
    const { file, raw, baseDir } = yield* readAdapterConfig(dir)
    const base = yield* loadFullModelDir(baseDir, arraySink)
    const adapter = yield* Effect.tryPromise({ try: () => readPeftAdapter(dir, base.config), catch: (e) => fail(file, reason(e), e) })
    const version = typeof raw["reins_policy_version"] === "number" ? (raw["reins_policy_version"] as number) : base.config.version
    return { ...base, config: base.config.withVersion(version), weights: mergeAdapters(base.config, adapter.lora, base.weights, adapter.adapters) }
  })

/** A model directory whose weights are `T`s (plain arrays, or tensors already on the backend). */
type ModelDirOf<T> = Omit<ModelDir, "weights" | "hf"> & { readonly weights: Record<string, T>; readonly hf: HfModelConfig }

/**
 * Each weight straight into a tensor in the wasm heap, its only copy: no JS array per tensor,
 * whose first touch (page faults) costs more than reading the file on some machines. The heap
 * grows once for all of them (`reserveHeap`); each is allocated unwritten (`uninitialized`): the
 * loader writes every value, and writing zeros first took a sixth of a 0.6 B-parameter model's
 * load. Matrices turned [in, out] are transposed by a SIMD kernel in the heap (transposeKernel.ts).
 */
const heapSink = (): WeightSink<tf.Tensor> => {
  const transposer = new HeapTransposer()
  return {
    reserve: (values) => reserveHeap(4 * values),
    alloc: (_, shape) => uninitialized(shape),
    values: view,
    transpose: (t, values, rows, cols, stride, offset) => transposer.into(values, t, rows, cols, stride, offset),
    dispose: (t) => t.dispose(),
    close: () => transposer.dispose()
  }
}

/**
 * Reads and checks everything but the weights first, then the weights through `sink` — last,
 * so that nothing can fail once they are in memory.
 */
const loadFullModelDir = <T>(dir: string, sink: WeightSink<T>, layout: (config: ModelConfig) => MatrixLayout = () => "inOut"): Effect.Effect<ModelDirOf<T>, CheckpointError> =>
  Effect.gen(function* () {
    const configFile = path.join(dir, CONFIG_FILE)
    const json = yield* readJson(configFile)
    yield* requireHfConfig(configFile, json)
    // HfConfigError names the key of config.json.
    const hf = yield* Effect.try({ try: () => decodeHfConfig(json), catch: (e) => fail(configFile, reason(e), e) })
    const { config } = hf
    const tokenizer = yield* loadTokenizer(dir).pipe(Effect.mapError(inFile(path.join(dir, "tokenizer.json"))))
    if (tokenizer.vocabSize > config.vocabSize) {
      return yield* fail(path.join(dir, "tokenizer.json"), `has ${tokenizer.vocabSize} ids, more than the model's vocab_size ${config.vocabSize}`)
    }
    const chatTemplate = yield* loadPromptTemplate(dir).pipe(Effect.mapError(inFile(path.join(dir, "chat_template.jinja"))))
    const genFile = path.join(dir, GENERATION_CONFIG_FILE)
    // Hugging Face models may have none: the eos ids of config.json and the defaults then.
    const hfDefault = !existsSync(genFile) ? GenerationConfig.withEos(hf.eosTokenIds) : undefined
    const generationConfig = hfDefault ?? (yield* readJson(genFile).pipe(
      Effect.flatMap((json) =>
        Effect.try({
          try: () => {
            const raw = json as Record<string, unknown>
            // Hugging Face writes a single id or a list.
            const eos = typeof raw?.["eos_token_id"] === "number" ? [raw["eos_token_id"]] : raw?.["eos_token_id"]
            return Schema.decodeUnknownSync(GenerationConfig)({ ...raw, eos_token_id: eos })
          },
          catch: (e) => fail(genFile, reason(e), e)
        })
      )
    ))
    for (const id of generationConfig.eosTokenIds) {
      if (id >= config.vocabSize) return yield* fail(genFile, `eos_token_id ${id} is outside the vocabulary of ${config.vocabSize}`)
    }
    const weights = yield* Effect.tryPromise({
      try: () => readHfParameters(dir, config, sink, layout(config)),
      // HfWeightsError names its file.
      catch: (e) => (e instanceof HfWeightsError ? inFile(e.file)(e) : fail(configFile, reason(e), e))
    })
    return { config, weights, tokenizer, chatTemplate, generationConfig, hf }
  })

/** Fails unless config.json is a Hugging Face one (the retired format is named as such). */
const requireHfConfig = (file: string, json: unknown): Effect.Effect<void, CheckpointError> => {
  if (isHfConfig(json)) return Effect.void
  const modelType = (json as Record<string, unknown> | null)?.["model_type"]
  return Effect.fail(
    modelType === RETIRED_FORMAT
      ? fail(file, `model_type "${RETIRED_FORMAT}" is a retired format (GELU MLP, not a Hugging Face architecture) that reins no longer loads; rebuild the model with \`reins sft\`, which writes LlamaForCausalLM`)
      : fail(file, `has no "architectures" list: not a Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM)`)
  )
}

/**
 * Writes a whole model directory (creating it if needed) in the Hugging Face layout of `hf`, or,
 * for a model of our own, of the architecture it is (`asHfModel`); config.json is written last.
 */
export const saveModelDir = (dir: string, contents: ModelDir): Effect.Effect<void, CheckpointError> =>
  Effect.gen(function* () {
    yield* Effect.tryPromise({ try: () => fs.mkdir(dir, { recursive: true }), catch: (e) => fail(dir, `cannot create (${reason(e)})`, e) })
    yield* Effect.try({
      try: () => checkWeights(parameterShapes(contents.config), contents.weights),
      catch: (e) => fail(path.join(dir, WEIGHTS_FILE), `not written: ${reason(e)}`, e)
    })
    const hfFiles = yield* Effect.try({
      try: () => hfModelFiles(contents.hf ?? asHfModel(contents.config, contents.generationConfig.eosTokenIds), contents.config, contents.weights),
      catch: (e) => fail(path.join(dir, CONFIG_FILE), `not written: ${reason(e)}`, e)
    })
    yield* write(path.join(dir, WEIGHTS_FILE), hfFiles.weights)
    // one file now: an index left by an earlier sharded save would point elsewhere
    yield* Effect.promise(() => fs.rm(path.join(dir, STALE_SHARD_INDEX), { force: true }))
    yield* saveTokenizer(dir, contents.tokenizer).pipe(Effect.mapError(inFile(path.join(dir, "tokenizer.json"))))
    yield* savePromptTemplate(dir, contents.chatTemplate).pipe(Effect.mapError(inFile(path.join(dir, "chat_template.jinja"))))
    yield* write(path.join(dir, GENERATION_CONFIG_FILE), JSON.stringify(Schema.encodeSync(GenerationConfig)(contents.generationConfig), null, 2) + "\n")
    yield* write(path.join(dir, CONFIG_FILE), JSON.stringify(hfFiles.config, null, 2) + "\n")
  })

/** Saves a live model (its current weights and version) with its tokenizer and template. */
export const saveModel = (
  dir: string,
  model: Transformer,
  tokenizer: Tokenizer,
  options: { readonly chatTemplate?: PromptTemplate; readonly generationConfig?: GenerationConfig } = {}
): Effect.Effect<void, CheckpointError> =>
  Effect.tryPromise({
    try: () => model.readWeightsAsync(),
    catch: (e) => new CheckpointError({ file: dir, message: `reading the model's weights: ${e instanceof Error ? e.message : String(e)}`, cause: e })
  }).pipe(Effect.flatMap((weights) =>
    saveModelDir(dir, {
      config: model.config.withVersion(model.version),
      weights,
      tokenizer,
      chatTemplate: options.chatTemplate ?? ChatTemplate.default(),
      generationConfig: options.generationConfig ?? GenerationConfig.forTokenizer(tokenizer)
    })
  ))

/**
 * Loads a model directory into a live model (the tfjs backend must be initialised), multiplying
 * as `defaultProducts` says. On wasm a full model directory's weights go straight from the file
 * into the model's tensors — for a model multiplied in place in the file's own [out, in] layout,
 * so without a transpose.
 */
export const loadModel = (dir: string): Effect.Effect<Omit<ModelDir, "weights"> & { readonly model: Transformer }, CheckpointError> =>
  Effect.suspend(() =>
    isWasm() && !isAdapterDir(dir)
      ? loadFullModelDir(dir, heapSink(), (config) => layoutOf(defaultProducts(config))).pipe(
          Effect.map(({ weights, ...rest }) => ({ ...rest, model: Transformer.fromTensors(rest.config, new Map(Object.entries(weights)), defaultProducts(rest.config)) }))
        )
      : loadModelDir(dir).pipe(Effect.map(({ weights, ...rest }) => ({ ...rest, model: Transformer.fromWeights(rest.config, weights) })))
  )

/** Writes `optimizer.safetensors` (AdamW moments and step). */
export const saveOptimizerState = (dir: string, state: OptimizerState, version: number): Effect.Effect<void, CheckpointError> => {
  const tensors: Record<string, TensorEntry> = {}
  for (const [name, data] of Object.entries(state.tensors)) tensors[name] = { dtype: "F32", shape: [data.length], data }
  return Effect.tryPromise({ try: () => fs.mkdir(dir, { recursive: true }), catch: (e) => fail(dir, `cannot create (${reason(e)})`, e) }).pipe(
    Effect.zipRight(write(path.join(dir, OPTIMIZER_FILE), encodeSafetensors(tensors, { step: String(state.step), version: String(version) })))
  )
}

/** Reads `optimizer.safetensors`, or `undefined` when the directory has none. */
export const loadOptimizerState = (dir: string): Effect.Effect<(OptimizerState & { readonly version: number }) | undefined, CheckpointError> => {
  const file = path.join(dir, OPTIMIZER_FILE)
  return Effect.tryPromise({ try: () => fs.readFile(file), catch: (e) => e }).pipe(
    Effect.matchEffect({
      onFailure: (e) =>
        (e as NodeJS.ErrnoException)?.code === "ENOENT" ? Effect.succeed(undefined) : Effect.fail(fail(file, `cannot read (${reason(e)})`, e)),
      onSuccess: (bytes) =>
        Effect.try({
          try: () => {
            const { tensors, metadata } = decodeSafetensors(bytes)
            const step = Number(metadata["step"])
            if (!Number.isSafeInteger(step) || step < 0) throw new Error(`missing or invalid step in the metadata`)
            const out: Record<string, Float32Array> = {}
            for (const [name, t] of tensors) {
              if (t.dtype !== "F32") throw new Error(`tensor ${name} is ${t.dtype}, expected F32`)
              out[name] = t.data as Float32Array
            }
            return { step, version: Number(metadata["version"] ?? 0), tensors: out }
          },
          catch: (e) => fail(file, reason(e), e)
        })
    })
  )
}
