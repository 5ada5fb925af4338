/**
 * Tiny random Hugging Face checkpoints of the Llama family, written in the exact HF layout
 * (config.json as transformers writes it, HF tensor names, [out, in] matrices, BF16 / F16 / F32,
 * one file or shards), and the comparisons the HF tests make against the float64 reference.
 */
import { decodeHfConfig, encodeSafetensors, f32ToBf16, f32ToF16, readHfWeights, type TensorEntry } from "@reins/policy"
import * as fs from "node:fs"
import * as path from "node:path"
import { expect } from "vitest"
import type { RefConfig } from "./reference/llamaFamily.js"

/** Deterministic values k/256 with |k| < 256: exact in BF16, F16 and F32 alike. */
export const values = (n: number, seed: number, scale = 40): Float32Array => {
  let s = seed >>> 0
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    out[i] = Math.round(((s / 2 ** 32) * 2 - 1) * scale) / 256
  }
  return out
}

export interface Case {
  readonly name: string
  readonly ref: RefConfig
  readonly config: Record<string, unknown>
}

export const base = (arch: RefConfig["architecture"], over: Partial<RefConfig>): RefConfig => ({
  architecture: arch,
  hidden: 32,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  headDim: 8,
  ff: 48,
  vocab: 80,
  eps: 1e-6,
  theta: 10000,
  tied: false,
  bias: { qkv: false, o: false },
  qkNorm: false,
  ...over
})

/** config.json as transformers writes it for each architecture. */
export const hfConfig = (r: RefConfig, extra: Record<string, unknown>): Record<string, unknown> => ({
  architectures: [r.architecture],
  model_type: r.architecture.replace("ForCausalLM", "").toLowerCase(),
  hidden_size: r.hidden,
  intermediate_size: r.ff,
  num_hidden_layers: r.layers,
  num_attention_heads: r.heads,
  num_key_value_heads: r.kvHeads,
  hidden_act: "silu",
  max_position_embeddings: 64,
  rms_norm_eps: r.eps,
  rope_theta: r.theta,
  tie_word_embeddings: r.tied,
  vocab_size: r.vocab,
  initializer_range: 0.02,
  use_cache: true,
  bos_token_id: 1,
  eos_token_id: [2, 3],
  transformers_version: "4.57.1",
  ...(r.scaling === undefined ? {} : { rope_scaling: r.scaling }),
  ...extra
})

export const CASES: ReadonlyArray<Case> = [
  (() => {
    const ref = base("LlamaForCausalLM", {
      bias: { qkv: true, o: true },
      scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 }
    })
    return { name: "Llama 3 (GQA, llama3 RoPE scaling, attention_bias, untied)", ref, config: hfConfig(ref, { attention_bias: true, mlp_bias: false, torch_dtype: "bfloat16" }) }
  })(),
  (() => {
    const ref = base("MistralForCausalLM", { kvHeads: 1, theta: 1e6 })
    return { name: "Mistral (one kv head, no sliding window)", ref, config: hfConfig(ref, { sliding_window: null, torch_dtype: "float16" }) }
  })(),
  (() => {
    const ref = base("Qwen2ForCausalLM", { bias: { qkv: true, o: false }, tied: true, scaling: { rope_type: "linear", factor: 2 } })
    return { name: "Qwen2.5 (q/k/v bias, tied, linear RoPE scaling)", ref, config: hfConfig(ref, { use_sliding_window: false, sliding_window: 32, max_window_layers: 2, torch_dtype: "bfloat16" }) }
  })(),
  (() => {
    const ref = base("Qwen3ForCausalLM", { headDim: 16, qkNorm: true, tied: true, theta: 1e6 })
    return { name: "Qwen3 (head_dim ≠ hidden/heads, q/k norm, tied)", ref, config: hfConfig(ref, { head_dim: 16, attention_bias: false, use_sliding_window: false, sliding_window: null, dtype: "float32" }) }
  })()
]

/** Random HF tensors (names and [out, in] shapes of the architecture). */
export const hfTensors = (r: RefConfig, seed: number): Map<string, { shape: Array<number>; values: Float32Array }> => {
  const t = new Map<string, { shape: Array<number>; values: Float32Array }>()
  let k = seed
  const add = (name: string, shape: Array<number>, scale?: number) => t.set(name, { shape, values: values(shape.reduce((a, b) => a * b, 1), k++, scale) })
  // 1 + j/128: still exact in BF16's 8 significant bits.
  const norm = (name: string, n: number) => t.set(name, { shape: [n], values: values(n, k++, 30).map((v) => 1 + Math.round(v * 128) / 128) })
  add("model.embed_tokens.weight", [r.vocab, r.hidden], 120)
  for (let l = 0; l < r.layers; l++) {
    const p = `model.layers.${l}`
    norm(`${p}.input_layernorm.weight`, r.hidden)
    add(`${p}.self_attn.q_proj.weight`, [r.heads * r.headDim, r.hidden])
    add(`${p}.self_attn.k_proj.weight`, [r.kvHeads * r.headDim, r.hidden])
    add(`${p}.self_attn.v_proj.weight`, [r.kvHeads * r.headDim, r.hidden])
    add(`${p}.self_attn.o_proj.weight`, [r.hidden, r.heads * r.headDim])
    if (r.bias.qkv) {
      add(`${p}.self_attn.q_proj.bias`, [r.heads * r.headDim])
      add(`${p}.self_attn.k_proj.bias`, [r.kvHeads * r.headDim])
      add(`${p}.self_attn.v_proj.bias`, [r.kvHeads * r.headDim])
    }
    if (r.bias.o) add(`${p}.self_attn.o_proj.bias`, [r.hidden])
    if (r.qkNorm) {
      norm(`${p}.self_attn.q_norm.weight`, r.headDim)
      norm(`${p}.self_attn.k_norm.weight`, r.headDim)
    }
    norm(`${p}.post_attention_layernorm.weight`, r.hidden)
    add(`${p}.mlp.gate_proj.weight`, [r.ff, r.hidden])
    add(`${p}.mlp.up_proj.weight`, [r.ff, r.hidden])
    add(`${p}.mlp.down_proj.weight`, [r.hidden, r.ff])
  }
  norm("model.norm.weight", r.hidden)
  if (!r.tied) add("lm_head.weight", [r.vocab, r.hidden])
  return t
}

export const DTYPE: Record<string, TensorEntry["dtype"]> = { bfloat16: "BF16", float16: "F16", float32: "F32" }

export const entry = (dtype: TensorEntry["dtype"], shape: Array<number>, v: Float32Array): TensorEntry =>
  dtype === "F32" ? { dtype, shape, data: v } : { dtype, shape, data: dtype === "BF16" ? f32ToBf16(v) : f32ToF16(v) }

/** Writes a model directory; `shards` > 1 splits the tensors and writes the index. */
export const writeCheckpoint = (dir: string, c: Case, tensors: ReturnType<typeof hfTensors>, shards = 1): void => {
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(c.config, null, 2))
  const dtype = DTYPE[(c.config["torch_dtype"] ?? c.config["dtype"]) as string]!
  const names = [...tensors.keys()]
  if (shards === 1) {
    const all = Object.fromEntries(names.map((n) => [n, entry(dtype, tensors.get(n)!.shape, tensors.get(n)!.values)]))
    fs.writeFileSync(path.join(dir, "model.safetensors"), encodeSafetensors(all))
    return
  }
  const weightMap: Record<string, string> = {}
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, "0")}-of-${String(shards).padStart(5, "0")}.safetensors`
    const part = names.filter((_, i) => i % shards === s)
    for (const n of part) weightMap[n] = file
    fs.writeFileSync(path.join(dir, file), encodeSafetensors(Object.fromEntries(part.map((n) => [n, entry(dtype, tensors.get(n)!.shape, tensors.get(n)!.values)]))))
  }
  fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }))
}

export const load = async (dir: string) => {
  const hf = decodeHfConfig(JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8")))
  return { hf, weights: await readHfWeights(dir, hf.config) }
}

/** max |a − b| / max |b| over all logits. */
export const relError = (a: ArrayLike<number>, ref: ReadonlyArray<ReadonlyArray<number>>): number => {
  const flat = ref.flat()
  expect(a.length).toBe(flat.length)
  let diff = 0
  let scale = 0
  for (let i = 0; i < flat.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - flat[i]!))
    scale = Math.max(scale, Math.abs(flat[i]!))
  }
  return diff / scale
}

export const IDS = [1, 17, 42, 5, 63, 8, 0, 29, 77, 3, 14]

