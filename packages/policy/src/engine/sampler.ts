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

/** Is token a ranked before token b: larger value first, the lower index on ties. */
const before = (values: Float64Array, a: number, b: number) => values[a]! > values[b]! || (values[a] === values[b] && a < b)

/**
 * The `k` best indices of `values`, best first (ties: lower index first) — in O(V log k) with a
 * heap of the k best so far, not a sort of the whole vocabulary (Qwen3's generation config asks
 * for top_k 20 of 152k: a full sort cost ~60 ms per token).
 */
export const topIndices = (values: Float64Array, k: number): Int32Array => {
  const n = Math.min(k, values.length)
  // heap[0] is the worst of the best n so far
  const heap = new Int32Array(n)
  let size = 0
  const worse = (a: number, b: number) => before(values, b, a)
  const up = (i: number) => {
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!worse(heap[i]!, heap[parent]!)) break
      ;[heap[i], heap[parent]] = [heap[parent]!, heap[i]!]
      i = parent
    }
  }
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1
      const r = l + 1
      let m = i
      if (l < size && worse(heap[l]!, heap[m]!)) m = l
      if (r < size && worse(heap[r]!, heap[m]!)) m = r
      if (m === i) return
      ;[heap[i], heap[m]] = [heap[m]!, heap[i]!]
      i = m
    }
  }
  for (let i = 0; i < values.length; i++) {
    if (size < n) {
      heap[size] = i
      up(size++)
    } else if (n > 0 && before(values, i, heap[0]!)) {
      heap[0] = i
      down(0)
    }
  }
  return heap.sort((a, b) => (before(values, a, b) ? -1 : 1))
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
      topIds = topIndices(logp, s.topLogprobs)
      topLogprobs = Float32Array.from(topIds, (i) => logp[i]!)
    }
    return { id, logprob: logp[id]!, topIds, topLogprobs }
  }

  private draw(logp: Float64Array, s: SamplerSettings, rng: Rng): number {
    const V = logp.length
    const probs = this.probs
    const truncate = (s.topK > 0 && s.topK < V) || s.topP < 1
    if (!truncate) {
      let u = rng.uniform()
      for (let i = 0; i < V; i++) {
        u -= probs[i]!
        if (u < 0) return i
      }
      return argmax(logp) // rounding left a sliver of mass: take the mode
    }
    const candidates = s.topK > 0 && s.topK < V ? topIndices(logp, s.topK) : nucleusCandidates(logp, probs, s.topP)
    // top-k: the mass of the k kept; top-p alone: all of it (the candidates are a prefix of all)
    const counted = s.topK > 0 && s.topK < V ? candidates : undefined
    let mass = 0
    if (counted !== undefined) for (let i = 0; i < counted.length; i++) mass += probs[counted[i]!]!
    else for (let i = 0; i < V; i++) mass += probs[i]!
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

/**
 * Every token that can be in the top-p nucleus, best first: those with probability ≥ (1 − p)/V.
 * The rest hold less than 1 − p of the mass together, so the ones kept hold more than p, and the
 * nucleus (the best tokens until their mass reaches p) is a prefix of them. A peaked distribution
 * keeps a few hundred of 152k tokens to sort instead of all.
 */
const nucleusCandidates = (logp: Float64Array, probs: Float64Array, topP: number): Int32Array => {
  const floor = (1 - topP) / probs.length
  let n = 0
  for (let i = 0; i < probs.length; i++) if (probs[i]! >= floor) n++
  const out = new Int32Array(n)
  n = 0
  for (let i = 0; i < probs.length; i++) if (probs[i]! >= floor) out[n++] = i
  return out.sort((a, b) => (before(logp, a, b) ? -1 : 1))
}

const argmax = (x: Float64Array): number => {
  let best = 0
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i
  return best
}
