/**
 * The policy bench's GGUF writer (bench/policy/gguf.ts, llamaGguf.ts), checked against the real
 * llama.cpp through node-llama-cpp: tiny random Llama and Qwen3 models written as F32 GGUF files
 * are parsed by node-llama-cpp's own GGUF reader (metadata, tensor names, dims, alignment), loaded
 * and run by llama.cpp on the CPU, and its next-token probabilities at every prompt position and
 * its greedy tokens match the production decoder's on the same weights.
 */
import { decodeHfConfig, DecodeWeights, FastDecoder, initBackend, type ModelConfig, parameterShapes, Rng, type Weights } from "@reins/policy"
import { getLlama, type Llama, LlamaLogLevel, readGgufFileInfo, type Token } from "node-llama-cpp"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { GGUF_ALIGNMENT, writeGguf } from "../../bench/policy/gguf.js"
import { interleaveRotaryRows, llamaFamilyGguf } from "../../bench/policy/llamaGguf.js"

const VOCAB = 300
const CASES = [
  { architecture: "LlamaForCausalLM", arch: "llama", extra: {} },
  { architecture: "Qwen3ForCausalLM", arch: "qwen3", extra: { head_dim: 32 } } // head_dim ≠ hidden / heads, q/k norms
] as const

const tinyConfig = (architecture: string, extra: Record<string, unknown>): ModelConfig =>
  decodeHfConfig({
    architectures: [architecture],
    hidden_size: 64,
    intermediate_size: 96,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    vocab_size: VOCAB,
    max_position_embeddings: 64,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    ...extra
  }).config

/** Weights large enough that the next-token distribution is far from uniform. */
const randomWeights = (config: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const out: Weights = {}
  for (const [name, shape] of Object.entries(parameterShapes(config))) {
    const norm = name.endsWith("norm.weight")
    out[name] = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => (norm ? 1 + 0.2 * rng.normal() : 0.3 * rng.normal()))
  }
  return out
}

const softmax = (row: Float32Array): Float64Array => {
  const m = Math.max(...row)
  const e = Float64Array.from(row, (v) => Math.exp(v - m))
  const z = e.reduce((a, b) => a + b, 0)
  return e.map((v) => v / z)
}

const argmax = (xs: ArrayLike<number>) => {
  let best = 0
  for (let i = 1; i < xs.length; i++) if (xs[i]! > xs[best]!) best = i
  return best
}

let dir: string
let llama: Llama

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "reins-gguf-test-"))
  await initBackend("wasm")
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false })
})

afterAll(async () => {
  await llama?.dispose()
  fs.rmSync(dir, { recursive: true, force: true })
})

describe("interleaveRotaryRows", () => {
  it("puts half-split pair (i, i + D/2) of each head on adjacent rows 2i, 2i + 1", () => {
    // Two heads of D = 4, one column: rows are their indices.
    const out = interleaveRotaryRows(Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7]), 2, 1)
    expect([...out]).toEqual([0, 2, 1, 3, 4, 6, 5, 7])
  })
})

describe.each(CASES)("GGUF of a tiny $architecture", ({ architecture, arch, extra }) => {
  const config = tinyConfig(architecture, extra)
  const weights = randomWeights(config, 7)
  const file = () => path.join(dir, `${arch}.gguf`)

  beforeAll(async () => {
    const g = llamaFamilyGguf(config, weights, { architecture, name: `tiny ${arch}`, bosTokenId: 1, eosTokenId: 2, preTokenizer: "default" })
    const bytes = await writeGguf(file(), g.metadata, g.tensors)
    expect(fs.statSync(file()).size).toBe(bytes)
  })

  it("is read back by node-llama-cpp's GGUF parser with the model's metadata and tensors", async () => {
    const info = await readGgufFileInfo(file(), { logWarnings: false })
    expect(info.version).toBe(3)
    expect(info.metadata.general.architecture).toBe(arch)
    const m = info.architectureMetadata as Record<string, unknown>
    expect(m["block_count"]).toBe(2)
    expect(m["embedding_length"]).toBe(64)
    expect(m["feed_forward_length"]).toBe(96)
    expect(m["attention"]).toMatchObject({ head_count: 4, head_count_kv: 2, key_length: config.headDim, value_length: config.headDim })
    const tensors = new Map(info.tensorInfo!.map((t) => [t.name, t]))
    expect(tensors.size).toBe(Object.keys(parameterShapes(config)).length)
    expect(tensors.has("output.weight")).toBe(false) // tied: llama.cpp reuses token_embd
    expect(tensors.get("token_embd.weight")!.dimensions.map(Number)).toEqual([64, VOCAB])
    expect(tensors.get("blk.1.attn_q.weight")!.dimensions.map(Number)).toEqual([64, 4 * config.headDim])
    expect(tensors.get("blk.0.ffn_down.weight")!.dimensions.map(Number)).toEqual([96, 64])
    expect(tensors.has("blk.0.attn_q_norm.weight")).toBe(arch === "qwen3")
    for (const t of tensors.values()) expect(Number(t.fileOffset) % GGUF_ALIGNMENT).toBe(0)
  })

  it("runs in llama.cpp with the production decoder's probabilities and greedy tokens", async () => {
    const prompt = [5, 17, 200, 33, 99, 150]
    const decoder = new FastDecoder(DecodeWeights.fromWeights(config, weights, 0))
    const ours = decoder.forward([{ cache: decoder.newCache(32), ids: Int32Array.from(prompt) }], "all")

    const model = await llama.loadModel({ modelPath: file(), gpuLayers: 0 })
    try {
      const context = await model.createContext({ contextSize: 64, threads: 1 })
      try {
        const sequence = context.getSequence()
        const sampling = { temperature: 1, topK: 0, topP: 1, minP: 0 }
        const out = await sequence.controlledEvaluate(prompt.map((t) => [t as Token, { generateNext: { probabilities: true, options: sampling } }] as const))
        let maxDiff = 0
        prompt.forEach((_, p) => {
          const expected = softmax(ours.subarray(p * VOCAB, (p + 1) * VOCAB))
          const probs = out[p]!.next!.probabilities!
          for (let t = 0; t < VOCAB; t++) maxDiff = Math.max(maxDiff, Math.abs(expected[t]! - (probs.get(t as Token) ?? 0)))
          expect(argmax(Float64Array.from({ length: VOCAB }, (_, t) => probs.get(t as Token) ?? 0))).toBe(argmax(expected))
        })
        expect(maxDiff).toBeLessThan(5e-3)

        // Greedy continuation: three tokens each way.
        await sequence.clearHistory()
        const theirs: Array<number> = []
        for await (const token of sequence.evaluate(prompt as Array<Token>, { temperature: 0 })) if (theirs.push(token) >= 3) break
        const cache = decoder.newCache(32)
        const greedy: Array<number> = []
        let logits = decoder.forward([{ cache, ids: Int32Array.from(prompt) }])
        for (let i = 0; i < 3; i++) {
          greedy.push(argmax(logits))
          logits = decoder.forward([{ cache, ids: Int32Array.from([greedy.at(-1)!]) }])
        }
        expect(theirs).toEqual(greedy)
      } finally {
        await context.dispose()
      }
    } finally {
      await model.dispose()
    }
  })
})
