/**
 * A model directory, laid out like a Hugging Face one so people recognise it:
 *
 *   config.json               architecture + policy `version` (see model/config.ts)
 *   model.safetensors         weights, F32, [in, out] matrices (names: `parameterShapes`)
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
import { Data, Effect, Schema } from "effect"
import { existsSync } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { ChatTemplate } from "../chat/ChatTemplate.js"
import type { PromptTemplate } from "../chat/PromptTemplate.js"
import { loadPromptTemplate, savePromptTemplate } from "../chat/PromptTemplateFiles.js"
import { decodeConfig, encodeConfig, type ModelConfig, parameterShapes } from "../model/config.js"
import { checkWeights, Transformer, type Weights } from "../model/transformer.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { loadTokenizer, saveTokenizer, writeFileAtomic } from "../tokenizer/TokenizerFiles.js"
import { mergeAdapters } from "../model/lora.js"
import { decodeHfConfig, type HfModelConfig } from "./hf/config.js"
import { hfModelFiles, isHfConfig, readHfModel, STALE_SHARD_INDEX } from "./hf/hfModel.js"
import { ADAPTER_CONFIG_FILE, readPeftAdapter } from "./hf/peft.js"
import { HfWeightsError } from "./hf/weights.js"
import { decodeSafetensors, encodeSafetensors, type TensorEntry } from "./safetensors.js"

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
    return new GenerationConfig({ eosTokenIds: [...tokenizer.stopIds], temperature: 1, topP: 1, topK: 0, maxNewTokens: 256 })
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

export interface OptimizerState {
  readonly step: number
  readonly tensors: Record<string, Float32Array>
}

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const fail = (file: string, message: string, cause?: unknown) => new CheckpointError({ file, message: `${file}: ${message}`, cause })

const readBytes = (file: string) =>
  Effect.tryPromise({ try: () => fs.readFile(file), catch: (e) => fail(file, `cannot read (${reason(e)})`, e) })

const readJson = (file: string) =>
  Effect.tryPromise({ try: () => fs.readFile(file, "utf8"), catch: (e) => fail(file, `cannot read (${reason(e)})`, e) }).pipe(
    Effect.flatMap((text) => Effect.try({ try: () => JSON.parse(text) as unknown, catch: (e) => fail(file, `invalid JSON (${reason(e)})`, e) }))
  )

const writeBytesAtomic = (file: string, bytes: Uint8Array): Promise<void> => {
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`
  return fs
    .writeFile(tmp, bytes, { flag: "wx" })
    .then(() => fs.rename(tmp, file))
    .catch(async (e: unknown) => {
      await fs.rm(tmp, { force: true })
      throw e
    })
}

const write = (file: string, data: string | Uint8Array) =>
  Effect.tryPromise({
    try: () => (typeof data === "string" ? writeFileAtomic(file, data) : writeBytesAtomic(file, data)),
    catch: (e) => fail(file, `cannot write (${reason(e)})`, e)
  })

/** Reads and checks `model.safetensors` against the config; returns the weights. */
const readWeights = (file: string, config: ModelConfig) =>
  readBytes(file).pipe(
    Effect.flatMap((bytes) =>
      Effect.try({
        try: () => {
          const { tensors, metadata } = decodeSafetensors(bytes)
          const shapes = parameterShapes(config)
          const weights: Weights = {}
          for (const [name, t] of tensors) {
            const expected = shapes[name]
            if (expected !== undefined && (t.dtype !== "F32" || t.shape.join(",") !== expected.join(","))) {
              throw new Error(`tensor ${name} is ${t.dtype} [${t.shape.join(", ")}], the config needs F32 [${expected.join(", ")}]`)
            }
            weights[name] = t.data as Float32Array
          }
          checkWeights(shapes, weights)
          const version = metadata["version"]
          if (version !== undefined && Number(version) !== config.version) {
            throw new Error(`holds version ${version} but config.json says ${config.version} (a save was interrupted?)`)
          }
          return weights
        },
        catch: (e) => fail(file, reason(e), e)
      })
    )
  )

/**
 * Loads and validates a whole model directory — or a LoRA checkpoint (a PEFT adapter directory
 * without config.json): its base model, named by `base_model_name_or_path`, with the adapter
 * merged in, at the adapter's policy version.
 */
export const loadModelDir = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.suspend(() =>
    existsSync(path.join(dir, ADAPTER_CONFIG_FILE)) && !existsSync(path.join(dir, CONFIG_FILE)) ? loadAdapterDir(dir) : loadFullModelDir(dir)
  )

/** The model's config alone (of a LoRA checkpoint: its base's), without reading any weight. */
export const readModelConfig = (dir: string): Effect.Effect<ModelConfig, CheckpointError> =>
  Effect.gen(function* () {
    const adapterFile = path.join(dir, ADAPTER_CONFIG_FILE)
    if (existsSync(adapterFile) && !existsSync(path.join(dir, CONFIG_FILE))) {
      const base = ((yield* readJson(adapterFile)) as Record<string, unknown>)?.["base_model_name_or_path"]
      if (typeof base !== "string" || base === "") return yield* fail(adapterFile, "base_model_name_or_path does not name the base model's directory")
      return yield* readModelConfig(path.resolve(dir, base))
    }
    const file = path.join(dir, CONFIG_FILE)
    const json = yield* readJson(file)
    return yield* Effect.try({ try: () => (isHfConfig(json) ? decodeHfConfig(json).config : decodeConfig(json)), catch: (e) => fail(file, reason(e), e) })
  })

const loadAdapterDir = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.gen(function* () {
    const file = path.join(dir, ADAPTER_CONFIG_FILE)
    const raw = (yield* readJson(file)) as Record<string, unknown>
    const baseName = raw?.["base_model_name_or_path"]
    if (typeof baseName !== "string" || baseName === "") return yield* fail(file, "base_model_name_or_path does not name the base model's directory")
    const baseDir = path.resolve(dir, baseName)
    const base = yield* loadFullModelDir(baseDir)
    const adapter = yield* Effect.tryPromise({ try: () => readPeftAdapter(dir, base.config), catch: (e) => fail(file, reason(e), e) })
    const version = typeof raw["reins_policy_version"] === "number" ? (raw["reins_policy_version"] as number) : base.config.version
    return { ...base, config: base.config.withVersion(version), weights: mergeAdapters(base.config, adapter.lora, base.weights, adapter.adapters) }
  })

const loadFullModelDir = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.gen(function* () {
    const configFile = path.join(dir, CONFIG_FILE)
    const json = yield* readJson(configFile)
    const hfModel = isHfConfig(json)
      ? yield* Effect.tryPromise({
        try: () => readHfModel(dir, json),
        // HfWeightsError names its file; HfConfigError names the key of config.json.
        catch: (e) => (e instanceof HfWeightsError ? new CheckpointError({ file: e.file, message: e.message, cause: e }) : fail(configFile, reason(e), e))
      })
      : undefined
    const config = hfModel?.hf.config ?? (yield* Effect.try({ try: () => decodeConfig(json), catch: (e) => fail(configFile, reason(e), e) }))
    const weights = hfModel?.weights ?? (yield* readWeights(path.join(dir, WEIGHTS_FILE), config))
    const tokenizer = yield* loadTokenizer(dir).pipe(Effect.mapError((e) => new CheckpointError({ file: path.join(dir, "tokenizer.json"), message: e.message, cause: e })))
    if (tokenizer.vocabSize > config.vocabSize) {
      return yield* fail(path.join(dir, "tokenizer.json"), `has ${tokenizer.vocabSize} ids, more than the model's vocab_size ${config.vocabSize}`)
    }
    const chatTemplate = yield* loadPromptTemplate(dir).pipe(
      Effect.mapError((e) => new CheckpointError({ file: path.join(dir, "chat_template.jinja"), message: e.message, cause: e }))
    )
    const genFile = path.join(dir, GENERATION_CONFIG_FILE)
    // Hugging Face models may have none: the eos ids of config.json and the defaults then.
    const hfDefault = hfModel !== undefined && !existsSync(genFile)
      ? new GenerationConfig({ eosTokenIds: [...hfModel.hf.eosTokenIds], temperature: 1, topP: 1, topK: 0, maxNewTokens: 256 })
      : undefined
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
    return { config, weights, tokenizer, chatTemplate, generationConfig, hf: hfModel?.hf }
  })

/** Writes a whole model directory (creating it if needed); config.json is written last. */
export const saveModelDir = (dir: string, contents: ModelDir): Effect.Effect<void, CheckpointError> =>
  Effect.gen(function* () {
    yield* Effect.tryPromise({ try: () => fs.mkdir(dir, { recursive: true }), catch: (e) => fail(dir, `cannot create (${reason(e)})`, e) })
    yield* Effect.try({
      try: () => checkWeights(parameterShapes(contents.config), contents.weights),
      catch: (e) => fail(path.join(dir, WEIGHTS_FILE), `not written: ${reason(e)}`, e)
    })
    const hfFiles = contents.hf === undefined ? undefined : hfModelFiles(contents.hf, contents.config, contents.weights)
    if (hfFiles !== undefined) {
      yield* write(path.join(dir, WEIGHTS_FILE), hfFiles.weights)
      // one file now: an index left by an earlier sharded save would point elsewhere
      yield* Effect.promise(() => fs.rm(path.join(dir, STALE_SHARD_INDEX), { force: true }))
    } else {
      const tensors: Record<string, TensorEntry> = {}
      const shapes = parameterShapes(contents.config)
      for (const [name, shape] of Object.entries(shapes)) tensors[name] = { dtype: "F32", shape, data: contents.weights[name]! }
      yield* write(path.join(dir, WEIGHTS_FILE), encodeSafetensors(tensors, { format: "pt", version: String(contents.config.version) }))
    }
    yield* saveTokenizer(dir, contents.tokenizer).pipe(Effect.mapError((e) => new CheckpointError({ file: path.join(dir, "tokenizer.json"), message: e.message, cause: e })))
    yield* savePromptTemplate(dir, contents.chatTemplate).pipe(
      Effect.mapError((e) => new CheckpointError({ file: path.join(dir, "chat_template.jinja"), message: e.message, cause: e }))
    )
    yield* write(path.join(dir, GENERATION_CONFIG_FILE), JSON.stringify(Schema.encodeSync(GenerationConfig)(contents.generationConfig), null, 2) + "\n")
    yield* write(path.join(dir, CONFIG_FILE), JSON.stringify(hfFiles?.config ?? encodeConfig(contents.config), null, 2) + "\n")
  })

/** Saves a live model (its current weights and version) with its tokenizer and template. */
export const saveModel = (
  dir: string,
  model: Transformer,
  tokenizer: Tokenizer,
  options: { readonly chatTemplate?: PromptTemplate; readonly generationConfig?: GenerationConfig } = {}
): Effect.Effect<void, CheckpointError> =>
  saveModelDir(dir, {
    config: model.config.withVersion(model.version),
    weights: model.readWeights(),
    tokenizer,
    chatTemplate: options.chatTemplate ?? ChatTemplate.default(),
    generationConfig: options.generationConfig ?? GenerationConfig.forTokenizer(tokenizer)
  })

/** Loads a model directory into a live model (the tfjs backend must be initialised). */
export const loadModel = (dir: string): Effect.Effect<Omit<ModelDir, "weights"> & { readonly model: Transformer }, CheckpointError> =>
  loadModelDir(dir).pipe(
    Effect.map(({ weights, ...rest }) => ({ ...rest, model: Transformer.fromWeights(rest.config, weights) }))
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
