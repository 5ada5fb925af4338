/**
 * Whether a model fits the wasm backend's heap, decided from its config alone — before any
 * weight is read, so a checkpoint too large for it fails in a second with a message saying what
 * it needs, not minutes later with an allocation error.
 *
 * The wasm heap holds the weights about twice while serving: the variables, and XNNPACK's
 * packed copy of every matrix it multiplies by (the engine's decoding snapshot shares the
 * variables' memory, but fuses q/k/v into a copy and, with LoRA, holds the merged matrices);
 * for full fine-tuning also a gradient and AdamW's two moments per weight. With LoRA only the
 * adapters have gradients and moments, so serving's figure stands. Activations and KV caches
 * come on top, so the estimate is a lower bound.
 */
import { type ModelConfig, parameterCount } from "./config.js"

/** wasm32's addressable heap. */
export const WASM_HEAP_BYTES = 4 * 1024 ** 3

const GIB = 1024 ** 3

export interface MemoryNeed {
  readonly parameters: number
  readonly servingBytes: number
  readonly fullTrainingBytes: number
}

export const memoryNeed = (config: ModelConfig): MemoryNeed => {
  const parameters = parameterCount(config)
  return { parameters, servingBytes: parameters * 4 * 2, fullTrainingBytes: parameters * 4 * 5 }
}

/** The reason `config` cannot run on the wasm backend, or undefined when it fits. */
export const wasmMisfit = (config: ModelConfig, options: { readonly lora: boolean }): string | undefined => {
  const need = memoryNeed(config)
  const bytes = options.lora ? need.servingBytes : need.fullTrainingBytes
  if (bytes <= WASM_HEAP_BYTES) return undefined
  const gib = (b: number) => `${(b / GIB).toFixed(1)} GiB`
  const what = options.lora ? "serving it (with LoRA adapters)" : `training all its weights (serving alone: ${gib(need.servingBytes)})`
  return (
    `the model has ${(need.parameters / 1e6).toFixed(0)}M parameters: ${what} needs at least ${gib(bytes)} of the wasm backend's ${gib(WASM_HEAP_BYTES)} heap. ` +
    `Use the tensorflow backend (REINS_BACKEND=tensorflow with @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node installed), which is not bound by that heap${options.lora ? "" : ", or train LoRA adapters (trainer.lora)"}`
  )
}
