/**
 * The reference device decoder (reference/tensorDecoder.ts: tfjs ops, what the WebGPU decoder's
 * shaders are held to), on the test backend: its logits are fastDecode.ts's for prompts, decoding
 * steps and steps that mix both, in any chunk order, for the plain and the variant Llama-family
 * configs; its draws are the Sampler's for the same uniforms, read back by `readDraw`; and the
 * device decoders' KV rows (kvRows.ts) are handed out and merged back as they should be. Engine
 * behaviour on a device decoder is engine.test.ts's, run for both kinds of decoder.
 */
import { describe, expect, it } from "@effect/vitest"
import { DecodeWeights, FastDecoder, KvRows, readDraw, Rng, RowRanges, Sampler, Transformer } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { beforeAll } from "vitest"
import { backend, tinyConfig, variantConfig } from "./model-fixtures.js"
import { drawOnDevice, TensorDecoder } from "./reference/tensorDecoder.js"

beforeAll(() => backend())

const V = 50

const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0)

/** Logit rows of a tensor decoder's step, as one array. */
const logitsOf = async (decoder: TensorDecoder, chunks: Parameters<TensorDecoder["forward"]>[0]) => {
  const rows = await decoder.forward(chunks)
  const out = new Float32Array(rows.length * V)
  rows.forEach((r, i) => {
    if (!(r instanceof Float32Array)) throw new Error("asked for no draw, got one")
    out.set(r, i * V)
  })
  return out
}

describe("reference device decoder", () => {
  for (const [name, config] of [["plain", tinyConfig(V)], ["variant (GQA, biases, q/k norms, untied head)", variantConfig(V)]] as const) {
    it(`${name}: the same logits as the fast decoder, prompts, decoding and mixed steps`, async () => {
      const model = Transformer.init(config, 3)
      const weights = DecodeWeights.fromModel(model)
      const fast = new FastDecoder(weights)
      const tensor = new TensorDecoder(model, 0, { kvBytes: 1 << 24, maxSequences: 8 })
      const prompts = [[1, 2, 3, 4, 5], [7, 8], [9], [10, 11, 12, 13, 14, 15, 16]]
      const fc = prompts.map(() => fast.newCache(40))
      const tc = prompts.map(() => tensor.kv.tryNewCache(40)!)
      // all four prompts at once (one of length 1 decodes beside three prefills)
      const first = prompts.map((p) => Int32Array.from(p))
      expect(maxDiff(await logitsOf(tensor, first.map((ids, i) => ({ cache: tc[i]!, ids }))), fast.forward(first.map((ids, i) => ({ cache: fc[i]!, ids })), "last").slice())).toBeLessThan(1e-5)
      for (let step = 0; step < 6; step++) {
        // decoding steps, chunks in another order each time; at step 3 sequence 1 takes a 5-token chunk
        const order = [3, 0, 2, 1].map((k) => (k + step) % 4)
        const next = order.map((i) => ({ i, ids: step === 3 && i === 1 ? Int32Array.of(3, 4, 5, 6, 7) : Int32Array.of((step * 7 + i * 3) % V) }))
        const got = await logitsOf(tensor, next.map(({ i, ids }) => ({ cache: tc[i]!, ids })))
        const want = fast.forward(next.map(({ i, ids }) => ({ cache: fc[i]!, ids })), "last").slice()
        expect(maxDiff(got, want), `step ${step}`).toBeLessThan(1e-5)
      }
      expect(tc.map((c) => c.length)).toEqual(fc.map((c) => c.length))
      for (const cache of tc) tensor.kv.releaseCache(cache)
      for (const cache of fc) fast.freeCache(cache)
      tensor.dispose()
      fast.dispose()
      weights.dispose()
      model.dispose()
    })
  }

})

describe("KV rows of a device decoder", () => {
  it("holds no more rows than its sequences can use, and hands out what it holds", () => {
    const roomy = new KvRows(64, 1 << 20, 3) // a context of 64, room for far more rows than 3 sequences use
    expect(roomy.rows).toBe(3 * 64)
    expect(roomy.maxCacheTokens).toBe(64)
    const caches = [0, 1, 2].map(() => roomy.tryNewCache(64))
    expect(caches.every((c) => c !== undefined)).toBe(true)
    expect(roomy.tryNewCache(1)).toBeUndefined() // 3 × 64 rows, all taken
    roomy.releaseCache(caches[1]!)
    expect(roomy.tryNewCache(10)?.start).toBe(caches[1]!.start)
    const none = new KvRows(64, 1, 3) // less than one 64-row block
    expect(none.maxCacheTokens).toBe(0)
    expect(none.tryNewCache(1)).toBeUndefined()
  })
})

describe("row ranges", () => {
  it("first fit; freed neighbours merge, in any order", () => {
    const r = new RowRanges(256)
    const [a, b, c, d] = [64, 64, 64, 64].map((n) => r.alloc(n))
    expect([a, b, c, d]).toEqual([0, 64, 128, 192])
    expect(r.alloc(64)).toBeUndefined()
    r.release(64, 64)
    r.release(192, 64)
    expect(r.alloc(128)).toBeUndefined() // two holes of 64, not adjacent
    r.release(128, 64) // 64..256 is one range now
    expect(r.alloc(192)).toBe(64)
    r.release(64, 192)
    r.release(0, 64)
    expect(r.alloc(256)).toBe(0)
  })
})

describe("device draws", () => {
  it("draw what the Sampler draws with the same uniforms, with its logprobs", () => {
    const rng = new Rng(9)
    const vocab = 300
    const rows = 64
    const logits = Float32Array.from({ length: rows * vocab }, () => rng.normal() * 2.5)
    for (const temperature of [0, 0.6, 1, 1.7]) {
      const us = Array.from({ length: rows }, () => rng.uniform())
      const picks = us.map((u) => ({ temperature, u }))
      const t = tf.tensor2d(logits, [rows, vocab])
      const d = drawOnDevice(t, picks)
      const values = d.dataSync() as Float32Array
      tf.dispose([t, d])
      const sampler = new Sampler()
      for (let r = 0; r < rows; r++) {
        const got = readDraw(values, r, picks[r]!, vocab)
        // the Sampler draws its uniform from the RNG: give it this row's
        const want = sampler.sample(logits.subarray(r * vocab, (r + 1) * vocab), { temperature, topP: 1, topK: 0, topLogprobs: 0 }, { uniform: () => us[r]! } as unknown as Rng)
        expect(got instanceof Float32Array).toBe(false)
        const g = got as { id: number; logprob: number }
        expect(g.id, `τ ${temperature}, row ${r}`).toBe(want.id)
        expect(Math.abs(g.logprob - want.logprob)).toBeLessThan(1e-4)
      }
    }
  })

  it("a draw that is not a token (a device that computed nothing) fails the step, saying so", () => {
    const pick = { temperature: 1, u: 0.5 }
    expect(() => readDraw(Float32Array.of(1.5e31, 2e23, 0, 0), 0, pick, 300)).toThrow(/the device drew no valid token \(id 1\.\d+e\+31/)
    expect(() => readDraw(Float32Array.of(300, -1, 0, 0), 0, pick, 300)).toThrow(/vocabulary 300/)
    expect(readDraw(Float32Array.of(7, -2.5, 3, -0.25), 0, { temperature: 0, u: 0 }, 300)).toEqual({ id: 3, logprob: -0.25 })
  })
})
