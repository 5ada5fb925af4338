/**
 * LoRA training and serving with the base multiplied in place (`Transformer.products` "heap",
 * gemmKernel.ts): what lets Qwen3-0.6B train on the wasm heap. Held to the same model with
 * tfjs's matmul (`products` "tfjs", checked against finite differences in lora.test.ts) on the
 * Llama family's variants: the fused head and log-softmax (headLogprobs.ts) give the same
 * log-probabilities and entropies, the adapters the same gradients under both losses, an
 * optimizer step the same adapters; the decoder's unmerged adapters (base + scale·(x·A)·B)
 * decode the logits of the merged weights, and its snapshot adds no copy of a weight.
 */
import {
  AdamW,
  DecodeWeights,
  initAdapters,
  LoraConfig,
  microBatchGradients,
  type ModelConfig,
  packSequences,
  trainStep,
  Transformer
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { beforeAll, describe, expect, it } from "vitest"
import { backend, maxAbsDiff, prefillThenStep, tinyConfig, variantConfig } from "./model-fixtures.js"

beforeAll(async () => {
  expect(await backend()).toBe("wasm") // the in-place products exist on wasm alone
})

const VOCAB = 61
const LORA = new LoraConfig({ rank: 4, alpha: 8 })

/** Two copies of one model with the same non-zero adapters: one multiplying with tfjs, one in place. */
const pair = (config: ModelConfig) => {
  const adapters = initAdapters(config, LORA, 3)
  // B is zero at init (the adapted model equals the base): give it values, so the update counts.
  let k = 0
  for (const [name, values] of Object.entries(adapters)) if (name.endsWith("lora_B")) for (let i = 0; i < values.length; i++) values[i] = Math.sin(++k) * 0.05
  const make = (products: "tfjs" | "heap") => {
    const model = Transformer.init(config, 7)
    model.attachLora(LORA, adapters)
    model.products = products
    return model
  }
  return { tfjs: make("tfjs"), heap: make("heap") }
}

/** 70 tokens over rows of 32: several rows, several sequences per row, three chunks of the fused head. */
const sequences = (pg: boolean) =>
  [23, 19, 28].map((n, s) => {
    const tokens = Int32Array.from({ length: n }, (_, i) => (i * 17 + s * 5 + 3) % VOCAB)
    const weights = Float32Array.from({ length: n }, (_, i) => (i === 0 ? 0 : 1 / 70))
    return pg
      ? { tokens, weights, advantages: new Float32Array(n).fill(s === 1 ? -1 : 0.5), behaviorLogprobs: Float32Array.from({ length: n }, (_, i) => -4 - 0.01 * i) }
      : { tokens, weights }
  })

const relative = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let scale = 0
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]!))
  return maxAbsDiff(a, b) / scale
}

const CASES: Array<[string, ModelConfig]> = [
  ["tiny (tied head)", tinyConfig(VOCAB)],
  ["variants (GQA, biases, q/k norms, untied head)", variantConfig(VOCAB)]
]

describe("LoRA training with the base multiplied in place", () => {
  it.each(CASES)("%s: log-probabilities, entropies, gradients and a step match tfjs's matmul", async (_name, config) => {
    const { tfjs, heap } = pair(config)
    try {
      const batches = packSequences(sequences(true), { maxTokens: 96, maxSeqLen: 32 })
      expect(batches.length).toBe(1)
      const batch = batches[0]!
      expect(batch.rows * batch.seqLen).toBeGreaterThan(64) // the fused head runs over three chunks of 32 rows
      // Scoring (no gradient): the fused head against logits → log-softmax.
      const score = (m: Transformer) => {
        const { entropy, logprobs } = m.tokenLogprobs(batch, batch.targets)
        const out = [Float32Array.from(logprobs.dataSync()), Float32Array.from(entropy.dataSync())] as const
        tf.dispose([entropy, logprobs])
        return out
      }
      const before = tf.memory().numTensors
      const [lpHeap, entHeap] = score(heap)
      expect(tf.memory().numTensors).toBe(before) // nothing stays: the head is the embedding (or lm_head) as held, [vocab, d]
      const [lpTfjs, entTfjs] = score(tfjs)
      expect(relative(lpHeap, lpTfjs)).toBeLessThan(1e-5)
      expect(relative(entHeap, entTfjs)).toBeLessThan(1e-5)
      // Gradients of every adapter under both losses.
      for (const objective of [{ kind: "sft" } as const, { kind: "pg", clipLow: 0.2, clipHigh: 0.2, dualClip: 3, tisCap: 2 } as const]) {
        const counted = tf.memory().numTensors
        const [g, want] = [await microBatchGradients(heap, batch, objective), await microBatchGradients(tfjs, batch, objective)]
        expect(Math.abs(g.loss - want.loss)).toBeLessThan(1e-5 * Math.max(1, Math.abs(want.loss)))
        expect(g.entropySum).toBeCloseTo(want.entropySum, 4)
        expect([...g.grads.keys()].sort()).toEqual([...want.grads.keys()].sort())
        for (const [name, grad] of want.grads) {
          const got = g.grads.get(name)!.dataSync()
          expect(relative(got, grad.dataSync()), name).toBeLessThan(1e-4)
        }
        for (const t of [...g.grads.values(), ...want.grads.values()]) t.dispose()
        expect(tf.memory().numTensors).toBe(counted) // nothing left behind by either pass
      }
      // One optimizer step each: the same adapters after, the base untouched.
      const base = heap.readWeights()
      for (const m of [heap, tfjs]) {
        const optimizer = new AdamW(m.trainable, { lr: 1e-2, maxGradNorm: 1 })
        await trainStep(m, optimizer, batches, { kind: "sft" })
        optimizer.dispose()
      }
      const [after, wanted] = [heap.readAdapters(), tfjs.readAdapters()]
      for (const name of Object.keys(wanted)) expect(relative(after[name]!, wanted[name]!), name).toBeLessThan(1e-4)
      expect(Object.keys(wanted).some((name) => maxAbsDiff(wanted[name]!, initAdapters(config, LORA, 3)[name]!) > 0)).toBe(true)
      const baseAfter = heap.readWeights()
      for (const name of Object.keys(base)) expect(maxAbsDiff(baseAfter[name]!, base[name]!), name).toBe(0)
    } finally {
      heap.dispose()
      tfjs.dispose()
    }
  })

  it.each(CASES)("%s: the decoder's unmerged adapters decode the merged weights' logits, with no copy of a weight", (_name, config) => {
    const { tfjs, heap } = pair(config)
    const ids = Int32Array.from({ length: 11 }, (_, i) => (i * 13 + 3) % VOCAB)
    const run = (model: Transformer, gemm: "tfjs" | "heap") => {
      const buffers = tf.memory().numDataBuffers
      const weights = DecodeWeights.fromModel(model, { gemm })
      // In place, the snapshot shares the variables' memory ([out, in] as the model holds them; a tied head is the embedding): no new buffer on the device.
      if (gemm === "heap") {
        expect(tf.memory().numDataBuffers).toBe(buffers)
        expect(weights.layers[1]!.qkv.parts!.map((t) => t.dataId)).toEqual(["wq", "wk", "wv"].map((m) => model.param(`layers.1.attn.${m}`).dataId))
        expect(weights.layers[1]!.qkv.parts!.map((t) => t.shape)).toEqual([[config.qDim, config.dModel], [config.kvDim, config.dModel], [config.kvDim, config.dModel]])
        expect(weights.head.parts![0]!.dataId).toBe(model.param(config.tieEmbeddings ? "tok_embeddings.weight" : "lm_head.weight").dataId)
      }
      return prefillThenStep(weights, ids) // a 10-token prefill (4-row tiles and left-over rows), then one row (kept tensors)
    }
    try {
      const want = run(tfjs, "tfjs")
      const got = run(heap, "heap")
      expect(got.length).toBe(want.length)
      expect(maxAbsDiff(got, want)).toBeLessThan(1e-5)
      // The model held [out, in] can still feed tfjs's matmul: its adapters merged in its layout (mergedTensors), then transposed.
      expect(maxAbsDiff(run(heap, "tfjs"), want)).toBeLessThan(1e-5)
      // And the adapters count: without them the logits differ.
      const plain = Transformer.init(config, 7)
      plain.products = "heap"
      const base = run(plain, "heap")
      plain.dispose()
      expect(maxAbsDiff(base, want)).toBeGreaterThan(1e-3)
    } finally {
      heap.dispose()
      tfjs.dispose()
    }
  })
})

describe("a model multiplied in place", () => {
  it.each(CASES)("%s: holds its linear matrices [out, in], reads and writes them [in, out], and trains adapters only", (_name, config) => {
    const model = Transformer.init(config, 11)
    try {
      const weights = model.readWeights()
      model.products = "heap"
      expect(model.param("layers.0.attn.wq").shape).toEqual([config.qDim, config.dModel])
      expect(model.param("layers.0.mlp.w2").shape).toEqual([config.dModel, config.dFf])
      expect(model.param("tok_embeddings.weight").shape).toEqual([VOCAB, config.dModel]) // the embedding is no linear layer
      const back = model.readWeights()
      for (const name of Object.keys(weights)) expect(Array.from(back[name]!), name).toEqual(Array.from(weights[name]!))
      // setWeights takes [in, out] too; switching back to tfjs's matmul restores its layout.
      const doubled = Object.fromEntries(Object.entries(weights).map(([name, v]) => [name, v.map((x) => 2 * x)]))
      model.setWeights(doubled)
      model.products = "tfjs"
      expect(model.param("layers.0.attn.wq").shape).toEqual([config.dModel, config.qDim])
      const again = model.readWeights()
      for (const name of Object.keys(weights)) expect(Array.from(again[name]!), name).toEqual(Array.from(doubled[name]!))
      // Without adapters there is nothing it may train: said at once, not as a missing gradient later.
      model.products = "heap"
      expect(() => model.trainable).toThrow(/multiplied in place .* trains LoRA adapters only; attach adapters first/)
      model.attachLora(LORA, initAdapters(config, LORA, 1))
      expect([...model.trainable.keys()].every((name) => name.includes("lora_"))).toBe(true)
    } finally {
      model.dispose()
    }
  })
})
