/**
 * The head and the token log-probabilities as one op, a few rows at a time, for a frozen head
 * multiplied in place (gemmKernel.ts): what LoRA training of a model with a large vocabulary
 * needs to fit the wasm heap. The plain path (`Transformer.forward` → `tokenLogprobs`) holds
 * every row's logits, their softmax and their gradient at once — for Qwen3's 151,936-token
 * vocabulary 0.6 MB each per token, ~0.5 GB for 256 tokens; this op holds one chunk's logits
 * and keeps, per token, only what the backward pass needs, a vector of the model's width:
 *
 *   z = h·Eᵀ                    [rows, V]  (E = the head as held [V, d]: the embedding, or lm_head)
 *   log π(t) = z_t − lse(z),    entropy = lse − Σ_j p_j·z_j,   p = softmax(z)
 *   ∂ log π(t) / ∂h = (onehot(t) − p)·E = G    [d]
 *
 * so the gradient reaching h is dy·G, row by row: no logits are kept, and the product that
 * computes G is the one the backward pass would have run anyway.
 */
import * as tf from "@tensorflow/tfjs"
import { heapGemm, heapGemmNt } from "./gemmKernel.js"
import { backward, upload, view } from "./heap.js"

/** Rows per chunk: 32 rows of a 151,936-token vocabulary are 19 MB of logits. */
const CHUNK_ROWS = 32

export interface HeadLogprobs {
  readonly logprobs: tf.Tensor1D
  /** Entropy of π at every row (no gradient; the caller disposes it). */
  readonly entropy: tf.Tensor1D
}

/**
 * log π(targets[i]) and the entropy for every row of h [N, d] (the final norm's output), given
 * the frozen head `e` [V, d] (one row per token, as a model multiplied in place holds it). With
 * `withGradient` the log-probabilities carry a gradient to h (see the module comment); without
 * it G is not computed.
 */
export const headLogprobs = (h: tf.Tensor2D, e: tf.Tensor2D, targets: Int32Array, withGradient: boolean): HeadLogprobs => {
  const [n, d] = h.shape
  if (targets.length !== n) throw new Error(`headLogprobs: ${targets.length} targets for ${n} rows`)
  let entropy: tf.Tensor1D | undefined
  const run = (x: tf.Tensor2D): { value: tf.Tensor1D; g: tf.Tensor2D | undefined } => {
    const logprobs = new Float32Array(n)
    const entropies = new Float32Array(n)
    const g = withGradient ? (tf.zeros([n, d]) as tf.Tensor2D) : undefined
    for (let r0 = 0; r0 < n; r0 += CHUNK_ROWS) {
      const rows = Math.min(CHUNK_ROWS, n - r0)
      tf.tidy(() => {
        const z = heapGemmNt(tf.slice(x, [r0, 0], [rows, d]), e)
        // `grad`: overwrite z with onehot(t) − p, the logits' gradient of log π(t).
        softmaxRows(view(z), rows, e.shape[0], targets.subarray(r0, r0 + rows), logprobs.subarray(r0), entropies.subarray(r0), g !== undefined)
        if (g !== undefined) {
          const part = heapGemm(z, e) // [rows, d]
          view(g).set(view(part), r0 * d) // both views after the last allocation
        }
      })
    }
    entropy = upload<tf.Rank.R1>(entropies, [n])
    return { value: upload<tf.Rank.R1>(logprobs, [n]), g }
  }
  if (!withGradient) return { logprobs: run(h).value, entropy: entropy! }
  const logprobs = (
    tf.customGrad(
      // @ts-expect-error tfjs types customGrad's callback with a rest parameter list
      (x: tf.Tensor2D, save: tf.GradSaveFunc) => {
        const { value, g } = run(x)
        entropy = tf.keep(entropy!) // tfjs disposes what a custom op's forward makes and does not return
        save([g!])
        return {
          value,
          gradFunc: (dy: tf.Tensor1D, saved: Array<tf.Tensor>) =>
            backward(dy, saved, () => tf.mul(saved[0]!, tf.reshape(dy, [n, 1])))
        }
      }
    ) as (x: tf.Tensor2D) => tf.Tensor1D
  )(h)
  return { logprobs, entropy: entropy! }
}

/**
 * For each row of z [rows, V]: its target's log-probability and its entropy into `logprobs` and
 * `entropies`; with `grad`, z overwritten with onehot(target) − softmax(z).
 */
const softmaxRows = (
  z: Float32Array,
  rows: number,
  vocab: number,
  targets: Int32Array,
  logprobs: Float32Array,
  entropies: Float32Array,
  grad: boolean
): void => {
  for (let i = 0; i < rows; i++) {
    const o = i * vocab
    const t = targets[i]!
    if (t < 0 || t >= vocab) throw new Error(`headLogprobs: target ${t} is outside the vocabulary of ${vocab}`)
    let max = -Infinity
    for (let j = o; j < o + vocab; j++) if (z[j]! > max) max = z[j]!
    let sum = 0
    let weighted = 0 // Σ e^(z−max)·z
    for (let j = o; j < o + vocab; j++) {
      const e = Math.exp(z[j]! - max)
      sum += e
      weighted += e * z[j]!
    }
    const lse = max + Math.log(sum)
    logprobs[i] = z[o + t]! - lse
    entropies[i] = lse - weighted / sum
    if (!grad) continue
    for (let j = o; j < o + vocab; j++) z[j] = -Math.exp(z[j]! - lse)
    z[o + t]! += 1
  }
}
