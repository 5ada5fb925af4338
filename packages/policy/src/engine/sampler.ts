/**
 * Picking the next token from a row of logits.
 *
 * Logprob convention: the reported logprob of a token is log softmax(z / τ) at that token, where
 * z are the model's logits and τ the request's temperature (τ = 1 when temperature is 0, i.e.
 * greedy). Top-k / top-p truncation is not folded in: the value is the log-probability under the
 * temperature-scaled policy, which a trainer can recompute from the weights and τ alone — it is
 * the behavior logprob that truncated importance sampling compares against. The optional top
 * logprobs are the k most likely tokens of the same distribution.
 *
 * Sampling: temperature 0 is greedy (argmax, lowest id on ties). Otherwise the candidates are the
 * top-k tokens (all if 0), then the smallest set of the most likely of them whose probability
 * reaches top_p, and one is drawn in proportion to its probability with the request's own RNG,
 * so a seeded request draws the same tokens whatever else runs beside it.
 */
import type { SamplingParams } from "@reins/protocol"
import type { Rng } from "../random.js"

export type SamplerSettings = Pick<SamplingParams, "temperature" | "topP" | "topK" | "topLogprobs">

export interface Sampled {
  readonly id: number
  readonly logprob: number
  readonly topIds: Int32Array | undefined
  readonly topLogprobs: Float32Array | undefined
}

/**
 * log softmax(z / τ) of one row into `out` (double precision), and the probabilities into
 * `probs` when given (the same exponentials, computed once).
 */
export const logSoftmax = (logits: Float32Array, temperature: number, out: Float64Array, probs?: Float64Array): Float64Array => {
  const inv = 1 / (temperature > 0 ? temperature : 1)
  let max = -Infinity
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]! * inv
    out[i] = v
    if (v > max) max = v
  }
  let sum = 0
  for (let i = 0; i < logits.length; i++) {
    const e = Math.exp(out[i]! - max)
    if (probs !== undefined) probs[i] = e
    sum += e
  }
  const lse = max + Math.log(sum)
  for (let i = 0; i < logits.length; i++) out[i] = out[i]! - lse
  if (probs !== undefined) for (let i = 0; i < logits.length; i++) probs[i] = probs[i]! / sum
  return out
}

/** Indices of `values` from largest to smallest (ties: lower index first), the first `k` of them. */
const topIndices = (values: Float64Array, k: number): Int32Array => {
  const idx = Int32Array.from({ length: values.length }, (_, i) => i)
  idx.sort((a, b) => values[b]! - values[a]! || a - b)
  return idx.subarray(0, Math.min(k, values.length))
}

export class Sampler {
  private logp = new Float64Array(0)
  private probs = new Float64Array(0)

  sample(logits: Float32Array, s: SamplerSettings, rng: Rng): Sampled {
    if (this.logp.length !== logits.length) {
      this.logp = new Float64Array(logits.length)
      this.probs = new Float64Array(logits.length)
    }
    const logp = logSoftmax(logits, s.temperature, this.logp, this.probs)
    const id = s.temperature === 0 ? argmax(logp) : this.draw(logp, s, rng)
    let topIds: Int32Array | undefined
    let topLogprobs: Float32Array | undefined
    if (s.topLogprobs > 0) {
      topIds = topIndices(logp, s.topLogprobs).slice()
      topLogprobs = Float32Array.from(topIds, (i) => logp[i]!)
    }
    return { id, logprob: logp[id]!, topIds, topLogprobs }
  }

  private draw(logp: Float64Array, s: SamplerSettings, rng: Rng): number {
    const V = logp.length
    const probs = this.probs
    const truncate = (s.topK > 0 && s.topK < V) || s.topP < 1
    if (!truncate) {
      // Inverse-CDF in id order: exact, no sort needed.
      let u = rng.uniform()
      for (let i = 0; i < V; i++) {
        u -= probs[i]!
        if (u < 0) return i
      }
      return argmax(logp) // rounding left a sliver of mass: take the mode
    }
    const candidates = topIndices(logp, s.topK > 0 ? s.topK : V)
    let mass = 0
    for (let i = 0; i < candidates.length; i++) mass += probs[candidates[i]!]!
    // Nucleus over the renormalised candidates: keep the shortest prefix reaching top_p.
    let kept = candidates.length
    if (s.topP < 1) {
      let cum = 0
      for (let i = 0; i < candidates.length; i++) {
        cum += probs[candidates[i]!]! / mass
        if (cum >= s.topP) {
          kept = i + 1
          break
        }
      }
    }
    let keptMass = 0
    for (let i = 0; i < kept; i++) keptMass += probs[candidates[i]!]!
    let u = rng.uniform() * keptMass
    for (let i = 0; i < kept; i++) {
      u -= probs[candidates[i]!]!
      if (u < 0) return candidates[i]!
    }
    return candidates[0]!
  }
}

const argmax = (x: Float64Array): number => {
  let best = 0
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i
  return best
}
