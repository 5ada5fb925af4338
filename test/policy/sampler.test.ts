/**
 * The Sampler's truncations without sorting the vocabulary (top-k by a heap, top-p over the only
 * tokens that can be in the nucleus) draw exactly what the plain definition draws — every
 * candidate sorted, the nucleus cut from the sorted list — for the same uniforms, on peaked and
 * flat distributions, with ties; and top logprobs are the k best, ties to the lower id.
 */
import { Rng, Sampler, type SamplerSettings, topIndices } from "@reins/policy"
import { describe, expect, it } from "vitest"

/** The definition (engine/sampler.ts's before 2026-12-04): sort everything, cut, draw. */
const reference = (logits: Float32Array, s: SamplerSettings, u: number): number => {
  const V = logits.length
  const inv = 1 / (s.temperature > 0 ? s.temperature : 1)
  const z = Array.from(logits, (x) => x * inv)
  const max = Math.max(...z)
  const e = z.map((x) => Math.exp(x - max))
  const sum = e.reduce((a, b) => a + b, 0)
  const p = e.map((x) => x / sum)
  const order = p.map((_, i) => i).sort((a, b) => p[b]! - p[a]! || a - b)
  const candidates = s.topK > 0 && s.topK < V ? order.slice(0, s.topK) : order
  const mass = candidates.reduce((m, i) => m + p[i]!, 0)
  let kept = candidates.length
  if (s.topP < 1) {
    let cum = 0
    for (let i = 0; i < candidates.length; i++) {
      cum += p[candidates[i]!]! / mass
      if (cum >= s.topP) {
        kept = i + 1
        break
      }
    }
  }
  const keptMass = candidates.slice(0, kept).reduce((m, i) => m + p[i]!, 0)
  let left = u * keptMass
  for (let i = 0; i < kept; i++) {
    left -= p[candidates[i]!]!
    if (left < 0) return candidates[i]!
  }
  return candidates[0]!
}

describe("Sampler", () => {
  it("top-k and top-p draw what sorting the whole vocabulary draws", () => {
    const rng = new Rng(5)
    const settings: Array<SamplerSettings> = [
      { temperature: 0.6, topP: 0.95, topK: 20, topLogprobs: 0 }, // Qwen3's generation_config
      { temperature: 0.7, topP: 0.9, topK: 0, topLogprobs: 0 },
      { temperature: 1, topP: 1, topK: 5, topLogprobs: 0 },
      { temperature: 1.3, topP: 0.5, topK: 0, topLogprobs: 3 },
      { temperature: 1, topP: 0.999, topK: 0, topLogprobs: 0 }
    ]
    const sampler = new Sampler()
    let draws = 0
    for (const scale of [6, 1, 0.05]) {
      // peaked, moderate and nearly flat rows; some with repeated values (ties)
      for (let row = 0; row < 40; row++) {
        const logits = Float32Array.from({ length: 2000 }, () => Math.round(rng.normal() * scale * (row % 3 === 0 ? 4 : 64)) / (row % 3 === 0 ? 4 : 64))
        for (const s of settings) {
          const u = rng.uniform()
          const got = sampler.sample(logits, s, { uniform: () => u } as unknown as Rng)
          expect(got.id, `scale ${scale}, row ${row}, ${JSON.stringify(s)}`).toBe(reference(logits, s, u))
          draws++
        }
      }
    }
    expect(draws).toBe(600)
  })

  it("top indices are the k best, best first, ties to the lower index, in any k", () => {
    const values = Float64Array.from([0.5, 2, -1, 2, 7, 0.5, 2, -3])
    expect(Array.from(topIndices(values, 3))).toEqual([4, 1, 3])
    expect(Array.from(topIndices(values, 5))).toEqual([4, 1, 3, 6, 0])
    expect(Array.from(topIndices(values, 20))).toEqual([4, 1, 3, 6, 0, 5, 2, 7])
    expect(Array.from(topIndices(values, 0))).toEqual([])
    const rng = new Rng(3)
    const many = Float64Array.from({ length: 5000 }, () => Math.round(rng.normal() * 8) / 8)
    const sorted = Array.from(many.keys()).sort((a, b) => many[b]! - many[a]! || a - b)
    for (const k of [1, 7, 64, 5000]) expect(Array.from(topIndices(many, k))).toEqual(sorted.slice(0, k))
  })
})
