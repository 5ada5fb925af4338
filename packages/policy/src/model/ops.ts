/**
 * The tensor primitives the transformer is built from, each with a hand-written gradient. They
 * exist because of how tfjs behaves on its wasm backend (the default here):
 *
 * - XNNPACK's fast matmul is only used for rank-2 `a·b` without transpose flags; everything else
 *   (batched matmul, transpose flags) falls back to a naive loop ~10x slower. So the dense
 *   products (matmul.ts) are rank-2 products whose gradients transpose explicitly (attention.ts
 *   does the same for its per-(row, head) products).
 * - Reductions over the leading axis, 2-D transposes, `tanh`/`erf` and `where` are slow kernels
 *   there; the column sums, transposes and masking are done in JavaScript over heap views.
 * - `gather` has no gradient kernel, and `oneHot(x, d, "float32")` is wrong: the embedding's
 *   gradient is a scatter-add in JavaScript, and log-probabilities pick the target's logit
 *   from a view instead of multiplying by a one-hot [N, vocab] matrix.
 *
 * On other backends (cpu, tensorflow) the plain tfjs formulation is used, and it is the
 * reference the fast paths are tested against (test/policy/model.test.ts).
 */
import * as tf from "@tensorflow/tfjs"
import type { RopeScaling } from "./config.js"
import { backward, isWasm, Scratch, upload, view } from "./heap.js"

const scratch = new Scratch()

// ---------------------------------------------------------------------------------------------
// Column sums

/** Σ over rows of a rank-2 tensor → [cols]. */
export const columnSum = (x: tf.Tensor2D): tf.Tensor1D => {
  if (!isWasm()) return tf.sum(x, 0)
  const [r, c] = x.shape
  const out = scratch.get("colsum", c).fill(0)
  const src = view(x)
  for (let i = 0; i < r; i++) {
    const o = i * c
    for (let j = 0; j < c; j++) out[j] += src[o + j]!
  }
  return upload(out, [c])
}

// ---------------------------------------------------------------------------------------------
// Normalization

/**
 * RMSNorm over the last axis of x [N, d], scaled by `weight`; gradients flow to x and, unless
 * `frozen` (LoRA's base weights), to weight. It keeps x, not x̂, for its gradient: x is the
 * residual stream, which the pass keeps anyway.
 */
export const rmsNorm = (x: tf.Tensor2D, weight: tf.Tensor1D, eps: number, frozen = false): tf.Tensor2D => {
  const forward = (x: tf.Tensor2D, g: tf.Tensor1D, save: tf.GradSaveFunc) => {
    const r = tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps)) // [N, 1]
    save([x, r, g])
    return {
      value: tf.mul(tf.mul(x, r), g),
      gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) =>
        backward(dy, saved, () => {
          const [x, r, g] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D]
          const xhat = tf.mul(x, r)
          const dxhat = tf.mul(dy, g)
          const proj = tf.mean(tf.mul(dxhat, xhat), -1, true)
          const dx = tf.mul(r, tf.sub(dxhat, tf.mul(xhat, proj)))
          return frozen ? [dx] : [dx, columnSum(tf.mul(dy, xhat))]
        })
    }
  }
  if (frozen) {
    // @ts-expect-error tfjs types customGrad's callback with a rest parameter list
    return (tf.customGrad((x: tf.Tensor2D, save: tf.GradSaveFunc) => forward(x, weight, save)) as (x: tf.Tensor2D) => tf.Tensor2D)(x)
  }
  // @ts-expect-error see above
  return (tf.customGrad(forward) as (x: tf.Tensor2D, g: tf.Tensor1D) => tf.Tensor2D)(x, weight)
}

/**
 * x + y, keeping nothing for its gradient (tfjs's add keeps both inputs, for broadcasting,
 * which would hold every layer's attention and MLP outputs until the backward pass ends).
 */
export const residual = (x: tf.Tensor2D, y: tf.Tensor2D): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see rmsNorm
      (x: tf.Tensor2D, y: tf.Tensor2D) => ({ value: tf.add(x, y), gradFunc: (dy: tf.Tensor2D) => backward(dy, [], () => [tf.clone(dy), tf.clone(dy)]) })
    ) as (x: tf.Tensor2D, y: tf.Tensor2D) => tf.Tensor2D
  )(x, y)

// ---------------------------------------------------------------------------------------------
// SwiGLU

/**
 * silu(g)·u, the gated MLP's activation, as one op that keeps only g and u for its gradient
 * (σ(g) is recomputed there): three ops' outputs and gradients would each hold [N, d_ff] until
 * the backward pass ends.
 */
export const swiglu = (g: tf.Tensor2D, u: tf.Tensor2D): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see rmsNorm
      (g: tf.Tensor2D, u: tf.Tensor2D, save: tf.GradSaveFunc) => {
        save([g, u])
        return {
          value: tf.tidy(() => tf.mul(tf.mul(g, tf.sigmoid(g)), u)),
          gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) =>
            backward(dy, saved, () => {
              const [g, u] = saved as [tf.Tensor2D, tf.Tensor2D]
              const s = tf.sigmoid(g)
              const du = tf.mul(dy, tf.mul(g, s))
              // d silu(g)/dg = σ(g)·(1 + g·(1 − σ(g)))
              const dg = tf.mul(tf.mul(dy, u), tf.mul(s, tf.add(1, tf.mul(g, tf.sub(1, s)))))
              return [dg, du]
            })
        }
      }
    ) as (g: tf.Tensor2D, u: tf.Tensor2D) => tf.Tensor2D
  )(g, u)

// ---------------------------------------------------------------------------------------------
// Embedding

/**
 * Rows `ids` of `table` [V, d], gathered (a one-hot matmul would cost as much as the head). Its
 * gradient, oneHotᵀ·dy, is computed as the equivalent scatter-add (wasm's gather has no
 * gradient kernel); it is not run at all when the table is frozen.
 */
export const embed = (ids: Int32Array, table: tf.Tensor2D): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see rmsNorm
      (w: tf.Tensor2D) => {
        const [vocab, d] = w.shape
        const value = tf.tidy(() => tf.gather(w, tf.tensor1d(ids, "int32")))
        return {
          value,
          gradFunc: (dy: tf.Tensor2D) =>
            backward(dy, [], () => {
              if (!isWasm()) {
                return tf.tidy(() => tf.matMul(tf.oneHot(tf.tensor1d(ids, "int32"), vocab, 1, 0, "int32").toFloat(), dy, true, false))
              }
              const out = scratch.get("embed-grad", vocab * d).fill(0)
              const g = view(dy)
              for (let n = 0; n < ids.length; n++) {
                const o = ids[n]! * d
                const s = n * d
                for (let j = 0; j < d; j++) out[o + j] += g[s + j]!
              }
              return upload(out, [vocab, d])
            })
        }
      }
    ) as (w: tf.Tensor2D) => tf.Tensor2D
  )(table)

// ---------------------------------------------------------------------------------------------
// Rotary position embeddings

/** cos/sin of every (position, frequency) pair: [contextLength, headDim / 2] each. */
export interface RopeTable {
  readonly half: number
  readonly cos: Float32Array
  readonly sin: Float32Array
}

/**
 * The rotation frequency of each pair, θ^(-2i/headDim), with `transformers`' scaling:
 *   linear   every frequency divided by `factor` (positions interpolated)
 *   llama3   long wavelengths (> original context / low_freq_factor) divided by `factor`,
 *            short ones (< original context / high_freq_factor) kept, a smooth blend between
 */
export const ropeFrequencies = (headDim: number, theta: number, scaling?: RopeScaling): Float64Array => {
  const half = headDim / 2
  const freqs = Float64Array.from({ length: half }, (_, i) => Math.pow(theta, (-2 * i) / headDim))
  if (scaling === undefined) return freqs
  if (scaling.type === "linear") return freqs.map((f) => f / scaling.factor)
  const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: original } = scaling
  return freqs.map((f) => {
    const wavelength = (2 * Math.PI) / f
    if (wavelength < original / high) return f
    if (wavelength > original / low) return f / factor
    const smooth = (original / wavelength - low) / (high - low)
    return (1 - smooth) * (f / factor) + smooth * f
  })
}

export const ropeTable = (contextLength: number, headDim: number, theta: number, scaling?: RopeScaling): RopeTable => {
  const half = headDim / 2
  const freqs = ropeFrequencies(headDim, theta, scaling)
  const cos = new Float32Array(contextLength * half)
  const sin = new Float32Array(contextLength * half)
  for (let p = 0; p < contextLength; p++) {
    for (let i = 0; i < half; i++) {
      const angle = p * freqs[i]!
      cos[p * half + i] = Math.cos(angle)
      sin[p * half + i] = Math.sin(angle)
    }
  }
  return { half, cos, sin }
}

/**
 * Rotates x [N, heads·headDim] in place, token n at `positions[n]`: within every head the pair
 * (x[i], x[i + half]) turns by angle pos·θ^(-2i/headDim) (the "half-split" convention).
 * `inverse` turns the other way, which is also the gradient of the rotation.
 */
export const ropeInPlace = (x: Float32Array, positions: Int32Array, heads: number, table: RopeTable, inverse = false): void => {
  const d = heads * 2 * table.half
  for (let n = 0; n < positions.length; n++) rotateRow(x, n * d, positions[n]!, heads, table, inverse)
}

/** The rotation of one token's heads, `heads` × [2·half] floats of `x` from `offset`, at position `pos`. */
export const rotateRow = (x: Float32Array, offset: number, pos: number, heads: number, table: RopeTable, inverse = false): void => {
  const half = table.half
  const t = pos * half
  const sign = inverse ? -1 : 1
  for (let h = 0; h < heads; h++) {
    const o = offset + h * 2 * half
    for (let i = 0; i < half; i++) {
      const c = table.cos[t + i]!
      const s = sign * table.sin[t + i]!
      const x1 = x[o + i]!
      const x2 = x[o + half + i]!
      x[o + i] = x1 * c - x2 * s
      x[o + half + i] = x2 * c + x1 * s
    }
  }
}

/** The same rotation with tfjs ops (the reference path): x·cos + rotateHalf(x)·sin. */
export const ropeTf = (x: tf.Tensor2D, positions: Int32Array, heads: number, table: RopeTable): tf.Tensor2D =>
  tf.tidy(() => {
    const [n, d] = x.shape
    const half = table.half
    const cos = new Float32Array(n * d)
    const sin = new Float32Array(n * d)
    for (let t = 0; t < n; t++) {
      const p = positions[t]! * half
      for (let h = 0; h < heads; h++) {
        for (let i = 0; i < half; i++) {
          const o = t * d + h * 2 * half + i
          cos[o] = cos[o + half] = table.cos[p + i]!
          sin[o] = sin[o + half] = table.sin[p + i]!
        }
      }
    }
    const pairs = tf.reshape(x, [n, heads, 2, half])
    const sign = tf.tensor4d([-1, 1], [1, 1, 2, 1])
    const rotated = tf.reshape(tf.mul(tf.reverse(pairs, 2), sign), [n, d])
    return tf.add(tf.mul(x, tf.tensor2d(cos, [n, d])), tf.mul(rotated, tf.tensor2d(sin, [n, d])))
  })

// ---------------------------------------------------------------------------------------------
// Token log-probabilities

/** H = lse − Σ p·z of every row, over views (no [N, V] temporary on the heap). */
const entropyOf = (p: Float32Array, z: Float32Array, lse: Float32Array, n: number, vocab: number): Float32Array => {
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) {
    let s = 0
    for (let j = i * vocab; j < (i + 1) * vocab; j++) s += p[j]! * z[j]!
    out[i] = lse[i]! - s
  }
  return out
}

/**
 * log softmax(logits)[target] for every row of logits [N, V] → [N], and the softmax entropy of
 * every row (values only, no gradient; a tensor, so no backend has to read it back here; kept
 * out of any enclosing tidy: the caller disposes it). The gradient is (oneHot − softmax)·dy,
 * computed directly: −softmax·dy, then dy added at each row's target (on wasm in place, through a view of the
 * gradient this op has just made), so no [N, V] one-hot matrix is ever built — at a 49k
 * vocabulary each [N, V] tensor of a 1024-token micro-batch is 200 MB of the wasm heap.
 */
export const tokenLogprobs = (logits: tf.Tensor2D, targets: Int32Array): { logprobs: tf.Tensor1D; entropy: tf.Tensor1D } => {
  let entropy: tf.Tensor1D | undefined
  const [n, vocab] = logits.shape
  const flat = Int32Array.from(targets, (t, i) => i * vocab + t) // each target's index in z, flattened
  const logprobs = (
    tf.customGrad(
      // @ts-expect-error see rmsNorm
      (z: tf.Tensor2D, save: tf.GradSaveFunc) => {
        // softmax is one vectorized XNNPACK kernel (exp alone is a slow scalar loop on wasm).
        // log-sum-exp = max − log(softmax at the max): stable, since that probability ≥ 1/V.
        const probs = tf.softmax(z)
        const lse = tf.reshape(tf.sub(tf.max(z, -1, true), tf.log(tf.max(probs, -1, true))), [n]) // [N]
        const picked = tf.tidy(() => tf.gather(tf.reshape(z, [n * vocab]), tf.tensor1d(flat, "int32")))
        const value = tf.sub(picked, lse)
        // kept: tfjs disposes what a custom op's forward makes and does not return
        entropy = tf.keep(
          isWasm()
            ? upload<tf.Rank.R1>(entropyOf(view(probs), view(z), view(lse), n, vocab), [n])
            : tf.tidy(() => tf.sub(lse, tf.sum(tf.mul(probs, z), -1)) as tf.Tensor1D)
        )
        save([probs])
        return {
          value,
          gradFunc: (dy: tf.Tensor1D, saved: Array<tf.Tensor>) =>
            backward(dy, saved, () => {
              const [probs] = saved as [tf.Tensor2D]
              if (!isWasm()) return [tf.mul(tf.sub(tf.oneHot(tf.tensor1d(targets, "int32"), vocab, 1, 0, "int32").toFloat(), probs), tf.reshape(dy, [n, 1]))]
              // A JS loop: wasm's broadcasting multiply takes ~7 ns a value, this ~1.
              const g = tf.fill([n, vocab], 0) as tf.Tensor2D
              const [gv, p, dyv] = [view(g), view(probs), view(dy)]
              for (let i = 0; i < n; i++) {
                const s = -dyv[i]!
                for (let j = i * vocab; j < (i + 1) * vocab; j++) gv[j] = p[j]! * s
                gv[flat[i]!]! += dyv[i]!
              }
              return [g]
            })
        }
      }
    ) as (z: tf.Tensor2D) => tf.Tensor1D
  )(logits)
  return { logprobs, entropy: entropy! }
}
