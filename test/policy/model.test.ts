/**
 * The transformer: the engine's KV-cache decode path (typed arrays, both gemm kinds, batched
 * prefill + decode) equals full recompute with the training forward pass, the wasm attention kernel and the
 * token-logprob kernel agree with plain tfjs (values and gradients), packed rows do not leak
 * attention across sequences, and initialisation is deterministic.
 */
import { describe, expect, it } from "@effect/vitest"
import { DecodeWeights, FastDecoder, initWeights, makeConfig, parameterCount, segmentStarts, Transformer } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { beforeAll } from "vitest"
import { attentionRank2, attentionReference } from "../../packages/policy/src/model/attention.js"
import { ropeTable, tokenLogprobs } from "../../packages/policy/src/model/ops.js"
import { backend, maxAbsDiff, referenceLogits, tinyConfig, variantConfig } from "./model-fixtures.js"

beforeAll(async () => {
  expect(await backend()).toBe("wasm")
})

const VOCAB = 61
const ids = Int32Array.from({ length: 20 }, (_, i) => (i * 17 + 3) % VOCAB)

describe.each([
  ["Llama, tied", () => tinyConfig(VOCAB)],
  ["GQA + q/k/v/o biases + q/k norms, untied", () => variantConfig(VOCAB)]
])("%s", (_, config) => {
  it.each(["tfjs", "js"] as const)("KV-cache decoding (%s gemm) equals full recompute, in chunks and batched across sequences", (gemm) => {
    const model = Transformer.init(config(), 11)
    const other = Int32Array.from({ length: 9 }, (_, i) => (i * 5 + 1) % VOCAB)
    const fullA = referenceLogits(model, ids)
    const fullB = referenceLogits(model, other)
    const tensorsBefore = tf.memory().numTensors
    const weights = DecodeWeights.fromModel(model, { gemm })
    const fast = new FastDecoder(weights)
    const a = fast.newCache()
    const b = fast.newCache()
    // Prefill A, then A decodes while B prefills in the same call, then both decode together.
    const all = fast.forward([{ cache: a, ids: ids.subarray(0, 6) }], "all")
    expect(maxAbsDiff(all, fullA.subarray(0, 6 * VOCAB))).toBeLessThan(1e-4)
    const mixed = fast.forward([{ cache: a, ids: ids.subarray(6, 7) }, { cache: b, ids: other.subarray(0, 4) }])
    expect(maxAbsDiff(mixed.subarray(0, VOCAB), fullA.subarray(6 * VOCAB, 7 * VOCAB))).toBeLessThan(1e-4)
    expect(maxAbsDiff(mixed.subarray(VOCAB), fullB.subarray(3 * VOCAB, 4 * VOCAB))).toBeLessThan(1e-4)
    for (let t = 0; t < 5; t++) {
      const step = fast.forward([{ cache: b, ids: other.subarray(4 + t, 5 + t) }, { cache: a, ids: ids.subarray(7 + t, 8 + t) }])
      expect(maxAbsDiff(step.subarray(0, VOCAB), fullB.subarray((4 + t) * VOCAB, (5 + t) * VOCAB))).toBeLessThan(1e-4)
      expect(maxAbsDiff(step.subarray(VOCAB), fullA.subarray((7 + t) * VOCAB, (8 + t) * VOCAB))).toBeLessThan(1e-4)
    }
    expect(a.length).toBe(12)
    expect(b.length).toBe(9)
    weights.dispose()
    expect(tf.memory().numTensors).toBe(tensorsBefore) // the snapshot leaves nothing behind
    model.dispose()
  })
})

describe("packed rows", () => {
  it("a row holding two sequences gives each the logits it has alone", () => {
    const model = Transformer.init(tinyConfig(VOCAB), 3)
    const a = ids.subarray(0, 7)
    const b = ids.subarray(7, 16)
    const seqLen = 20
    const inputIds = new Int32Array(seqLen)
    inputIds.set(a)
    inputIds.set(b, 7)
    const positions = Int32Array.from({ length: seqLen }, (_, i) => (i < 7 ? i : i < 16 ? i - 7 : 0))
    const segments = Int32Array.from({ length: seqLen }, (_, i) => (i < 7 ? 0 : i < 16 ? 1 : -1))
    const logits = model.forward({ rows: 1, seqLen, inputIds, positions, segments })
    const packed = logits.dataSync() as Float32Array
    expect(maxAbsDiff(packed.subarray(0, 7 * VOCAB), referenceLogits(model, a))).toBeLessThan(1e-4)
    expect(maxAbsDiff(packed.subarray(7 * VOCAB, 16 * VOCAB), referenceLogits(model, b))).toBeLessThan(1e-4)
    logits.dispose()
    model.dispose()
  })
})

describe("wasm kernels match plain tfjs", () => {
  it.each([2, 1])("rank-2 attention: same output and gradients as batched-matmul attention, over packed segments (%i kv heads of 2)", (KV) => {
    const B = 2
    const T = 8
    const H = 2
    const hd = 4
    const segments = Int32Array.from([0, 0, 0, 1, 1, 1, 1, -1, 0, 0, 0, 0, 0, 0, 0, 0])
    const positions = Int32Array.from([0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 6, 7])
    const layout = { rows: B, seqLen: T, heads: H, kvHeads: KV, headDim: hd, positions, segStart: segmentStarts(B, T, segments), rope: ropeTable(16, hd, 10000), training: true }
    const [q, k, v, w] = [1, 2, 3, 4].map((s) => tf.randomNormal([B * T, (s === 2 || s === 3 ? KV : H) * hd], 0, 1, "float32", s) as tf.Tensor2D) as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.Tensor2D]
    type Attn = typeof attentionReference
    const run = (f: Attn) => {
      const value = tf.tidy(() => f(q, k, v, { ...layout, training: false }))
      const grads = tf.grads((a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) => tf.sum(tf.mul(f(a as tf.Tensor2D, b as tf.Tensor2D, c as tf.Tensor2D, layout), w)))([q, k, v])
      const out = [value, ...grads].map((t) => new Float32Array(t.dataSync() as Float32Array))
      tf.dispose([value, ...grads])
      return out
    }
    const before = tf.memory().numTensors
    const ref = run(attentionReference)
    const fast = run(attentionRank2)
    ref.forEach((r, i) => expect(maxAbsDiff(fast[i]!, r)).toBeLessThan(1e-5))
    expect(tf.memory().numTensors).toBe(before)
    tf.dispose([q, k, v, w])
  })

  it("token logprobs: log-softmax at the target, and its gradient", () => {
    const z = tf.tidy(() => tf.mul(tf.randomNormal([24, 40], 0, 1, "float32", 9), 8)) as tf.Tensor2D
    const targets = Int32Array.from({ length: 24 }, (_, i) => (i * 7) % 40)
    const w = tf.randomNormal([24], 0, 1, "float32", 10)
    const oneHot = tf.tidy(() => tf.oneHot(tf.tensor1d(targets, "int32"), 40, 1, 0, "int32").toFloat())
    const reference = (x: tf.Tensor) => tf.sum(tf.mul(tf.logSoftmax(x as tf.Tensor2D), oneHot), -1)
    const mine = tf.tidy(() => tokenLogprobs(z, targets).logprobs)
    const theirs = tf.tidy(() => reference(z))
    expect(maxAbsDiff(mine.dataSync(), theirs.dataSync())).toBeLessThan(1e-4)
    const g1 = tf.grad((x: tf.Tensor) => tf.sum(tf.mul(tokenLogprobs(x as tf.Tensor2D, targets).logprobs, w)))(z)
    const g2 = tf.grad((x: tf.Tensor) => tf.sum(tf.mul(reference(x), w)))(z)
    expect(maxAbsDiff(g1.dataSync(), g2.dataSync())).toBeLessThan(1e-5)
    const { entropy } = tf.tidy(() => {
      const r = tokenLogprobs(z, targets)
      return { entropy: r.entropy }
    })
    const p = tf.tidy(() => tf.softmax(z)).arraySync() as Array<Array<number>>
    const h = p.map((row) => -row.reduce((s, x) => s + (x > 0 ? x * Math.log(x) : 0), 0))
    expect(maxAbsDiff(entropy.dataSync(), h)).toBeLessThan(1e-3)
    tf.dispose([z, w, oneHot, mine, theirs, g1, g2, entropy])
  })
})

describe("initialisation", () => {
  it("is deterministic per seed and documented in size", () => {
    const config = makeConfig({ vocabSize: 512, dModel: 128, nLayers: 4, nHeads: 4, contextLength: 256 })
    expect(config.dFf).toBe(352) // 8/3 of d_model, rounded up to 32: the parameters of a 4× GELU MLP
    expect(parameterCount(config)).toBe(512 * 128 + 4 * (2 * 128 + 4 * 128 * 128 + 3 * 128 * 352) + 128)
    const a = initWeights(tinyConfig(VOCAB), 5)
    const b = initWeights(tinyConfig(VOCAB), 5)
    const c = initWeights(tinyConfig(VOCAB), 6)
    for (const name of Object.keys(a)) expect(Buffer.from(a[name]!.buffer).equals(Buffer.from(b[name]!.buffer))).toBe(true)
    expect(maxAbsDiff(a["layers.0.attn.wq"]!, c["layers.0.attn.wq"]!)).toBeGreaterThan(0)
    expect(a["norm.weight"]!.every((x) => x === 1)).toBe(true)
  })

  it("rejects configs it cannot build", () => {
    expect(() => makeConfig({ vocabSize: 10, dModel: 30, nLayers: 1, nHeads: 4, contextLength: 8 })).toThrow(/divisible/)
    expect(() => makeConfig({ vocabSize: 10, dModel: 12, nLayers: 1, nHeads: 4, contextLength: 8 })).toThrow(/even head dimension/)
    expect(() => Transformer.fromWeights(tinyConfig(VOCAB), {})).toThrow(/missing parameter/)
  })
})
