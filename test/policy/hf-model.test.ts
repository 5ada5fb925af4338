/**
 * Hugging Face checkpoints of the Llama family (Llama, Mistral, Qwen2, Qwen3): tiny random models
 * written in the exact HF layout (config.json as transformers writes it, HF tensor names,
 * [out, in] matrices, BF16 / F16 / F32, single file or shards), loaded by reins and run through
 * both forward passes — the training forward (Transformer) and the engine's decoder
 * (FastDecoder) — against a float64 reference written from the transformers definitions
 * (reference/llamaFamily.ts), to 1e-4 relative. Then the bad inputs: each a clear error naming
 * the file or key.
 */
import {
  decodeHfConfig,
  DecodeWeights,
  encodeSafetensors,
  f32ToBf16,
  f32ToF16,
  bf16ToF32,
  f16ToF32,
  FastDecoder,
  HfConfigError,
  readHfWeights,
  type TensorEntry,
  Transformer
} from "@reins/policy"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { BACKEND, referenceLogits } from "./model-fixtures.js"
import { type RefConfig, referenceForward, type RefTensors } from "./reference/llamaFamily.js"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "reins-hf-"))
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

/** Deterministic values k/256 with |k| < 256: exact in BF16, F16 and F32 alike. */
const values = (n: number, seed: number, scale = 40): Float32Array => {
  let s = seed >>> 0
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    out[i] = Math.round(((s / 2 ** 32) * 2 - 1) * scale) / 256
  }
  return out
}

interface Case {
  readonly name: string
  readonly ref: RefConfig
  readonly config: Record<string, unknown>
}

const base = (arch: RefConfig["architecture"], over: Partial<RefConfig>): RefConfig => ({
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
const hfConfig = (r: RefConfig, extra: Record<string, unknown>): Record<string, unknown> => ({
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

const CASES: ReadonlyArray<Case> = [
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
const hfTensors = (r: RefConfig, seed: number): Map<string, { shape: Array<number>; values: Float32Array }> => {
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

const DTYPE: Record<string, TensorEntry["dtype"]> = { bfloat16: "BF16", float16: "F16", float32: "F32" }

const entry = (dtype: TensorEntry["dtype"], shape: Array<number>, v: Float32Array): TensorEntry =>
  dtype === "F32" ? { dtype, shape, data: v } : { dtype, shape, data: dtype === "BF16" ? f32ToBf16(v) : f32ToF16(v) }

/** Writes a model directory; `shards` > 1 splits the tensors and writes the index. */
const writeCheckpoint = (dir: string, c: Case, tensors: ReturnType<typeof hfTensors>, shards = 1): void => {
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

const load = async (dir: string) => {
  const hf = decodeHfConfig(JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8")))
  return { hf, weights: await readHfWeights(dir, hf.config) }
}

/** max |a − b| / max |b| over all logits. */
const relError = (a: ArrayLike<number>, ref: ReadonlyArray<ReadonlyArray<number>>): number => {
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

const IDS = [1, 17, 42, 5, 63, 8, 0, 29, 77, 3, 14]

describe("Hugging Face checkpoints of the Llama family", () => {
  it("runs on the production backend", () => expect(BACKEND).toBe("wasm"))

  for (const [i, c] of CASES.entries()) {
    it(`${c.name}: both forward passes match the float64 reference to 1e-4`, async () => {
      const tensors = hfTensors(c.ref, 100 * (i + 1))
      const dir = path.join(tmp, `case-${i}`)
      writeCheckpoint(dir, c, tensors, i % 2 === 0 ? 1 : 3)
      const { hf, weights } = await load(dir)
      expect(hf.architecture).toBe(c.ref.architecture)
      expect(hf.eosTokenIds).toEqual([2, 3])
      const ref = referenceForward(c.ref, tensors as RefTensors, IDS)
      // A wrong reference (or a model that ignores its weights) would not be this far from noise.
      expect(Math.max(...ref.flat().map(Math.abs))).toBeGreaterThan(0.05)

      const model = Transformer.fromWeights(hf.config, weights)
      try {
        const ids = Int32Array.from(IDS)
        expect(relError(referenceLogits(model, ids), ref)).toBeLessThan(1e-4)

        // The engine's decoder: a prefill of 6 tokens, then one token at a time.
        const snapshot = DecodeWeights.fromModel(model)
        const fast = new FastDecoder(snapshot)
        const cache = fast.newCache(32)
        const rows: Array<number> = [...fast.forward([{ cache, ids: ids.subarray(0, 6) }], "all")]
        for (let t = 6; t < ids.length; t++) rows.push(...fast.forward([{ cache, ids: ids.subarray(t, t + 1) }], "last"))
        expect(relError(rows, ref)).toBeLessThan(1e-4)
        fast.freeCache(cache)
        snapshot.dispose()
      } finally {
        model.dispose()
      }
    })
  }

  it("BF16 and F16 conversions round to nearest even and keep specials", () => {
    // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie → even (1); 1 + 3·2^-8 → 1 + 2^-6 (even);
    // 3.4e38 is past its largest finite value.
    const b = new Float32Array([1, -2.5, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 3.4e38, Infinity, -Infinity, 0, -0])
    expect([...bf16ToF32(f32ToBf16(b))]).toEqual([1, -2.5, 1, 1 + 2 ** -6, 1 + 2 ** -7, Infinity, Infinity, -Infinity, 0, -0])
    // f16 keeps 11: 1 + 2^-11 ties to 1, 1 + 3·2^-11 to 1 + 2^-9; 65520 overflows; 2^-24 is the
    // smallest subnormal, 2^-25 a tie to 0, 3·2^-26 rounds up to 2^-24.
    const h = new Float32Array([1, -2.5, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65520, 1e6, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -14, Infinity, -0])
    expect([...f16ToF32(f32ToF16(h))]).toEqual([1, -2.5, 1, 1 + 2 ** -9, 65504, Infinity, Infinity, 2 ** -24, 0, 2 ** -24, 2 ** -14, Infinity, -0])
    expect(Number.isNaN(bf16ToF32(f32ToBf16(new Float32Array([NaN])))[0])).toBe(true)
    expect(Number.isNaN(f16ToF32(f32ToF16(new Float32Array([NaN])))[0])).toBe(true)
  })
})

describe("Hugging Face checkpoints that cannot be used", () => {
  const good = CASES[0]!
  const config = (over: Record<string, unknown>) => ({ ...good.config, ...over })

  it.each([
    [{ architectures: ["GPT2LMHeadModel"] }, /architectures: "GPT2LMHeadModel" is not supported/],
    [{ architectures: ["Qwen3MoeForCausalLM"] }, /architectures: "Qwen3MoeForCausalLM"/],
    [{ num_local_experts: 8 }, /num_local_experts: 8: mixture-of-experts/],
    [{ hidden_act: "gelu" }, /hidden_act: "gelu" is not supported/],
    [{ rope_scaling: { rope_type: "yarn", factor: 4 } }, /rope_scaling\.rope_type: "yarn" is not supported/],
    [{ rope_parameters: { rope_type: "dynamic", rope_theta: 10000 } }, /rope_parameters\.rope_type: "dynamic"/],
    [{ architectures: ["MistralForCausalLM"], sliding_window: 4096 }, /sliding_window: 4096: sliding-window attention/],
    [{ architectures: ["Qwen2ForCausalLM"], use_sliding_window: true }, /use_sliding_window: true/],
    [{ mlp_bias: true }, /mlp_bias: true is not supported/],
    [{ num_key_value_heads: 3 }, /num_key_value_heads: 3 does not divide/],
    [{ hidden_size: "32" }, /hidden_size: must be a positive integer, got "32"/],
    [{ torch_dtype: "float8_e4m3fn" }, /torch_dtype: "float8_e4m3fn" is not supported/]
  ])("refuses %j by naming the key", (over, message) => {
    expect(() => decodeHfConfig(config(over))).toThrow(HfConfigError)
    expect(() => decodeHfConfig(config(over))).toThrow(message)
  })

  it("accepts rope_parameters (newer transformers) like rope_theta + rope_scaling", () => {
    const { rope_theta: _t, rope_scaling: scaling, ...rest } = good.config
    const newer = decodeHfConfig({ ...rest, rope_parameters: { ...(scaling as object), rope_theta: 10000 } })
    expect(newer.config.ropeScaling).toEqual(decodeHfConfig(good.config).config.ropeScaling)
  })

  const broken = async (name: string, damage: (dir: string) => void) => {
    const dir = path.join(tmp, name)
    writeCheckpoint(dir, CASES[1]!, hfTensors(CASES[1]!.ref, 7), 3)
    damage(dir)
    return load(dir)
  }

  it("a missing shard names the shard file", async () => {
    await expect(broken("missing-shard", (d) => fs.rmSync(path.join(d, "model-00002-of-00003.safetensors")))).rejects.toThrow(/model-00002-of-00003\.safetensors: missing shard/)
  })

  it("a truncated file names the file", async () => {
    await expect(
      broken("truncated", (d) => {
        const f = path.join(d, "model-00001-of-00003.safetensors")
        fs.truncateSync(f, fs.statSync(f).size - 10)
      })
    ).rejects.toThrow(/model-00001-of-00003\.safetensors: truncated/)
  })

  it("a shape that disagrees with config.json names the tensor and both shapes", async () => {
    await expect(
      broken("shape", (d) => {
        const cfg = JSON.parse(fs.readFileSync(path.join(d, "config.json"), "utf8"))
        fs.writeFileSync(path.join(d, "config.json"), JSON.stringify({ ...cfg, intermediate_size: 40 }))
      })
    ).rejects.toThrow(/tensor model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight is \[48, 32\]|\[32, 48\], config\.json implies/)
  })

  it("an index that names no shard for a tensor, and a tensor the config does not use", async () => {
    await expect(
      broken("index", (d) => {
        const f = path.join(d, "model.safetensors.index.json")
        const index = JSON.parse(fs.readFileSync(f, "utf8"))
        delete index.weight_map["model.norm.weight"]
        fs.writeFileSync(f, JSON.stringify(index))
      })
    ).rejects.toThrow(/model\.safetensors\.index\.json: does not name a shard for tensor model\.norm\.weight/)
    const dir = path.join(tmp, "extra")
    const tensors = hfTensors(CASES[3]!.ref, 3)
    tensors.set("model.layers.0.self_attn.rotary_emb.inv_freq", { shape: [4], values: new Float32Array(4) }) // ignored, as transformers does
    tensors.set("model.layers.9.mlp.gate_proj.weight", { shape: [2, 2], values: new Float32Array(4) })
    writeCheckpoint(dir, CASES[3]!, tensors)
    await expect(load(dir)).rejects.toThrow(/model\.safetensors: unexpected tensor model\.layers\.9\.mlp\.gate_proj\.weight/)
  })
})
