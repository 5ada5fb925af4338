/**
 * The project's small default policy: what `reins serve` creates on first use when no trained
 * checkpoint exists yet. Initialisation is deterministic (same vocabulary size and seed → same
 * bytes on every machine) and needs no tfjs backend.
 */
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { ChatTemplate } from "../chat/ChatTemplate.js"
import { CheckpointError, CONFIG_FILE, GenerationConfig, loadModelDir, type ModelDir, saveModelDir } from "../checkpoint/modelDir.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { makeConfig, type ModelConfig } from "./config.js"
import { initWeights } from "./weights.js"

/**
 * ~1M parameters at a 512-token vocabulary, a small Llama: d_model 128, 4 layers of 4 heads,
 * SwiGLU d_ff 352, tied embeddings; 1024 tokens of context (agent transcripts need room).
 */
export const defaultModelConfig = (vocabSize: number, overrides: Partial<Parameters<typeof makeConfig>[0]> = {}): ModelConfig =>
  makeConfig({ vocabSize, dModel: 128, nLayers: 4, nHeads: 4, contextLength: 1024, ...overrides })

export interface InitModelDirOptions {
  readonly tokenizer: Tokenizer
  /** Default: `defaultModelConfig(tokenizer.vocabSize)`. */
  readonly config?: ModelConfig
  readonly seed?: number
  readonly chatTemplate?: ChatTemplate
  readonly generationConfig?: GenerationConfig
}

/** Writes a freshly initialised model directory (version 0). */
export const initModelDir = (dir: string, options: InitModelDirOptions): Effect.Effect<ModelDir, CheckpointError> => {
  const config = options.config ?? defaultModelConfig(options.tokenizer.vocabSize)
  const contents: ModelDir = {
    config,
    weights: initWeights(config, options.seed ?? 0),
    tokenizer: options.tokenizer,
    chatTemplate: options.chatTemplate ?? ChatTemplate.default(),
    generationConfig: options.generationConfig ?? GenerationConfig.forTokenizer(options.tokenizer)
  }
  return saveModelDir(dir, contents).pipe(Effect.as(contents))
}

/** Loads `dir` if it holds a model (config.json), otherwise initialises one there first. */
export const ensureModelDir = (dir: string, options: InitModelDirOptions): Effect.Effect<ModelDir, CheckpointError> =>
  Effect.tryPromise({ try: () => fs.access(path.join(dir, CONFIG_FILE)), catch: () => "missing" as const }).pipe(
    Effect.matchEffect({ onFailure: () => initModelDir(dir, options), onSuccess: () => loadModelDir(dir) })
  )
