/**
 * Hugging Face checkpoints of the Llama family (Llama, Mistral, Qwen2, Qwen3): tiny random models
 * written in the exact HF layout (config.json as transformers writes it, HF tensor names,
 * [out, in] matrices, BF16 / F16 / F32, single file or shards), loaded by reins and run through
 * both forward passes — the training forward (Transformer) and the engine's decoder
 * (FastDecoder) — against a float64 reference written from the transformers definitions
 * (reference/llamaFamily.ts), to 1e-4 relative — and again loaded as a model multiplied in place
 * holds it (matrices [out, in] as in the file, no transpose). Then the bad inputs: each a clear
 * error naming the file or key.
 */
import {
  bf16ToF32, decodeHfConfig, DecodeWeights, f16ToF32, f32ToBf16, f32ToF16, FastDecoder, HfConfigError, readHfParameters, storedShapes, Transformer, type WeightSink
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { BACKEND, referenceLogits } from "./model-fixtures.js"
import { CASES, hfTensors, IDS, load, relError, writeCheckpoint } from "./hf-fixtures.js"
import { referenceForward, type RefTensors } from "./reference/llamaFamily.js"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "reins-hf-"))

/** Each parameter into a Float32Array of the shape asked for. */
const arrays: WeightSink<Float32Array> = { alloc: (_, shape) => new Float32Array(shape.reduce((a, b) => a * b, 1)), values: (a) => a, dispose: () => {} }
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

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

      // As tfjs's matmul wants them ([in, out]), and as the in-place products do ([out, in], read from the file as stored).
      const held = await readHfParameters(dir, hf.config, arrays, "outIn")
      const shapes = storedShapes(hf.config, "outIn")
      const heldTensors = new Map(Object.entries(held).map(([name, v]) => [name, tf.tensor(v, [...shapes[name]!]) as tf.Tensor]))
      for (const model of [Transformer.fromWeights(hf.config, weights, "tfjs"), Transformer.fromTensors(hf.config, heldTensors, "heap")]) {
        try {
          const ids = Int32Array.from(IDS)
          expect(relError(referenceLogits(model, ids), ref), model.products).toBeLessThan(1e-4)

          // The engine's decoder: a prefill of 6 tokens, then one token at a time.
          const snapshot = DecodeWeights.fromModel(model)
          expect(snapshot.gemm).toBe(model.products)
          const fast = new FastDecoder(snapshot)
          const cache = fast.newCache(32)
          const rows: Array<number> = [...fast.forward([{ cache, ids: ids.subarray(0, 6) }], "all")]
          for (let t = 6; t < ids.length; t++) rows.push(...fast.forward([{ cache, ids: ids.subarray(t, t + 1) }], "last"))
          expect(relError(rows, ref), model.products).toBeLessThan(1e-4)
          fast.freeCache(cache)
          snapshot.dispose()
          // Whatever the layout held, the weights read back [in, out], as the file's values.
          const back = model.readWeights()
          for (const name of Object.keys(weights)) expect(Array.from(back[name]!), name).toEqual(Array.from(weights[name]!))
        } finally {
          model.dispose()
        }
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
