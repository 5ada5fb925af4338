/**
 * LoRA (Hu et al. 2021), as PEFT implements it: a frozen linear layer W gains a trainable
 * low-rank update, y = x·W + (alpha / rank) · dropout(x)·A·B, with A [in, rank] initialised
 * like PEFT's (uniform ±1/√in, kaiming-uniform with a = √5) and B [rank, out] zero, so training
 * starts from the base model exactly. Only A and B (and their optimizer state) are trained and
 * saved; serving uses the merged weights W + (alpha / rank)·A·B.
 *
 * Targets are the Hugging Face module names of the Llama family's linear layers.
 */
import { Schema } from "effect"
import { Rng } from "../random.js"
import { type ModelConfig, parameterShapes } from "./config.js"

export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const
export type LoraTarget = (typeof LORA_TARGETS)[number]

/** Our parameter of each target, within a layer. */
const PARAM_OF: Record<LoraTarget, string> = {
  q_proj: "attn.wq",
  k_proj: "attn.wk",
  v_proj: "attn.wv",
  o_proj: "attn.wo",
  gate_proj: "mlp.w1",
  up_proj: "mlp.w3",
  down_proj: "mlp.w2"
}

export class LoraConfig extends Schema.Class<LoraConfig>("LoraConfig")({
  rank: Schema.Int.pipe(Schema.positive()),
  alpha: Schema.Number.pipe(Schema.positive()),
  dropout: Schema.optionalWith(Schema.Number.pipe(Schema.between(0, 0.99)), { default: () => 0 }),
  targets: Schema.optionalWith(Schema.NonEmptyArray(Schema.Literal(...LORA_TARGETS)), { default: () => [...LORA_TARGETS] as [LoraTarget, ...Array<LoraTarget>] })
}) {
  get scale(): number {
    return this.alpha / this.rank
  }
}

/** One adapted matrix: our parameter name, its shape [in, out], and its adapters' names. */
export interface LoraSite {
  readonly param: string
  readonly rows: number
  readonly cols: number
  readonly a: string
  readonly b: string
}

/** Every adapted matrix of the model (a target the architecture lacks, e.g. up_proj of a GELU MLP, is an error). */
export const loraSites = (config: ModelConfig, lora: LoraConfig): Array<LoraSite> => {
  const shapes = parameterShapes(config)
  const sites: Array<LoraSite> = []
  for (let l = 0; l < config.nLayers; l++) {
    for (const target of lora.targets) {
      const param = `layers.${l}.${PARAM_OF[target]}`
      const shape = shapes[param]
      if (shape === undefined) throw new Error(`LoRA target ${target}: this model has no ${PARAM_OF[target]}`)
      sites.push({ param, rows: shape[0]!, cols: shape[1]!, a: `${param}.lora_A`, b: `${param}.lora_B` })
    }
  }
  return sites
}

/** Fresh adapters: A uniform ±1/√in, B zero (the adapted model equals the base). */
export const initAdapters = (config: ModelConfig, lora: LoraConfig, seed: number): Record<string, Float32Array> => {
  const rng = new Rng(seed)
  const out: Record<string, Float32Array> = {}
  for (const s of loraSites(config, lora)) {
    const bound = 1 / Math.sqrt(s.rows)
    out[s.a] = Float32Array.from({ length: s.rows * lora.rank }, () => (2 * rng.uniform() - 1) * bound)
    out[s.b] = new Float32Array(lora.rank * s.cols)
  }
  return out
}

/** W + scale·A·B for every adapted matrix (the others as they are). */
export const mergeAdapters = (
  config: ModelConfig,
  lora: LoraConfig,
  weights: Readonly<Record<string, Float32Array>>,
  adapters: Readonly<Record<string, Float32Array>>
): Record<string, Float32Array> => {
  const out: Record<string, Float32Array> = { ...weights }
  const r = lora.rank
  for (const s of loraSites(config, lora)) {
    const a = adapters[s.a]
    const b = adapters[s.b]
    if (a === undefined || b === undefined) throw new Error(`missing LoRA adapter for ${s.param}`)
    const merged = new Float32Array(weights[s.param]!)
    for (let i = 0; i < s.rows; i++) {
      for (let k = 0; k < r; k++) {
        const aik = a[i * r + k]! * lora.scale
        if (aik === 0) continue
        const row = i * s.cols
        const brow = k * s.cols
        for (let j = 0; j < s.cols; j++) merged[row + j]! += aik * b[brow + j]!
      }
    }
    out[s.param] = merged
  }
  return out
}
