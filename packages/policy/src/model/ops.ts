/**
 * The tensor primitives the transformer is built from, each with a hand-written gradient. They
 * exist because of how tfjs behaves on its wasm backend (the default here):
 *
 * - XNNPACK's fast matmul is only used for rank-2 `a·b` without transpose flags; everything else
 *   (batched matmul, transpose flags) falls back to a naive loop ~10x slower. So `matmul` is a
 *   rank-2 product whose gradient transposes explicitly, and attention runs its per-(row, head)
 *   products as rank-2 matmuls too (`attentionRank2`).
 * - Reductions over the leading axis, 2-D transposes, `tanh`/`erf` and `where` are slow kernels
 *   there; the column sums, transposes and masking below are done in JavaScript over heap views.
 * - `gather` has no gradient kernel, and `oneHot(x, d, "float32")` is wrong: embeddings are a
 *   one-hot (int32, then cast) matmul whose gradient is a scatter-add.
 *
 * On other backends (cpu, tensorflow) the plain tfjs formulation is used, and it is the
 * reference the fast paths are tested against (test/policy/ops.test.ts).
 */
import * as tf from "@tensorflow/tfjs"
import type { RopeScaling } from "./config.js"
import { BufferPool, isWasm, Scratch, upload, view } from "./heap.js"

const scratch = new Scratch()
const pool = new BufferPool()

// ---------------------------------------------------------------------------------------------
// Transpose, column sums

/** `xᵀ` of a rank-2 tensor; on wasm a cache-blocked JS copy (3x faster than its kernel). */
export const transpose2d = (x: tf.Tensor2D): tf.Tensor2D => {
  if (!isWasm()) return tf.transpose(x)
  const [r, c] = x.shape
  const out = scratch.get("transpose", r * c)
  const src = view(x)
  for (let i0 = 0; i0 < r; i0 += 16) {
    const i1 = Math.min(r, i0 + 16)
    for (let j0 = 0; j0 < c; j0 += 16) {
      const j1 = Math.min(c, j0 + 16)
      for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) out[j * r + i] = src[i * c + j]!
    }
  }
  return upload(out, [c, r])
}

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
// Matmul

/** `a·b` for rank-2 tensors, with a gradient made only of untransposed rank-2 matmuls. */
export const matmul: (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D = tf.customGrad(
  // @ts-expect-error tfjs types customGrad's callback with a rest parameter list
  (a: tf.Tensor2D, b: tf.Tensor2D, save: tf.GradSaveFunc) => {
    save([a, b])
    return {
      value: tf.matMul(a, b),
      gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) => {
        const [sa, sb] = saved as [tf.Tensor2D, tf.Tensor2D]
        const bt = transpose2d(sb)
        const da = tf.matMul(dy, bt)
        bt.dispose()
        const at = transpose2d(sa)
        const db = tf.matMul(at, dy)
        at.dispose()
        return [da, db]
      }
    }
  }
) as never

// ---------------------------------------------------------------------------------------------
// Normalization

/**
 * RMSNorm (`bias` undefined) or LayerNorm over the last axis of x [N, d], scaled by `weight`.
 * Returns the output; gradients flow to x, weight and bias.
 */
export const norm = (x: tf.Tensor2D, weight: tf.Tensor1D, bias: tf.Tensor1D | undefined, eps: number): tf.Tensor2D =>
  bias === undefined ? rmsNorm(x, weight, eps) : layerNorm(x, weight, bias, eps)

const rmsNorm = (x: tf.Tensor2D, weight: tf.Tensor1D, eps: number): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (x: tf.Tensor2D, g: tf.Tensor1D, save: tf.GradSaveFunc) => {
        const r = tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps)) // [N, 1]
        const xhat = tf.mul(x, r)
        save([xhat, r, g])
        return {
          value: tf.mul(xhat, g),
          gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) => {
            const [xhat, r, g] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D]
            const dxhat = tf.mul(dy, g)
            const proj = tf.mean(tf.mul(dxhat, xhat), -1, true)
            const dx = tf.mul(r, tf.sub(dxhat, tf.mul(xhat, proj)))
            const dg = columnSum(tf.mul(dy, xhat))
            return [dx, dg]
          }
        }
      }
    ) as (x: tf.Tensor2D, g: tf.Tensor1D) => tf.Tensor2D
  )(x, weight)

const layerNorm = (x: tf.Tensor2D, weight: tf.Tensor1D, bias: tf.Tensor1D, eps: number): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (x: tf.Tensor2D, g: tf.Tensor1D, b: tf.Tensor1D, save: tf.GradSaveFunc) => {
        const xc = tf.sub(x, tf.mean(x, -1, true))
        const r = tf.rsqrt(tf.add(tf.mean(tf.square(xc), -1, true), eps))
        const xhat = tf.mul(xc, r)
        save([xhat, r, g])
        return {
          value: tf.add(tf.mul(xhat, g), b),
          gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) => {
            const [xhat, r, g] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D]
            const dxhat = tf.mul(dy, g)
            const mean = tf.mean(dxhat, -1, true)
            const proj = tf.mean(tf.mul(dxhat, xhat), -1, true)
            const dx = tf.mul(r, tf.sub(tf.sub(dxhat, mean), tf.mul(xhat, proj)))
            return [dx, columnSum(tf.mul(dy, xhat)), columnSum(dy)]
          }
        }
      }
    ) as (x: tf.Tensor2D, g: tf.Tensor1D, b: tf.Tensor1D) => tf.Tensor2D
  )(x, weight, bias)

// ---------------------------------------------------------------------------------------------
// Embedding

/**
 * Rows `ids` of `table` [V, d] as a one-hot matmul (int32 one-hot, then cast: see the module
 * comment). Its gradient, oneHotᵀ·dy, is computed as the equivalent scatter-add.
 */
export const embed = (ids: Int32Array, table: tf.Tensor2D): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (w: tf.Tensor2D) => {
        const [vocab, d] = w.shape
        const oneHot = tf.tidy(() => tf.oneHot(tf.tensor1d(ids, "int32"), vocab, 1, 0, "int32").toFloat())
        const value = tf.matMul(oneHot, w)
        oneHot.dispose()
        return {
          value,
          gradFunc: (dy: tf.Tensor2D) => {
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
          }
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
  const half = table.half
  const d = heads * 2 * half
  const sign = inverse ? -1 : 1
  for (let n = 0; n < positions.length; n++) {
    const t = positions[n]! * half
    for (let h = 0; h < heads; h++) {
      const o = n * d + h * 2 * half
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
// Attention

/**
 * Where a batch's tokens sit: `rows` rows of `seqLen` tokens (N = rows·seqLen), each row holding
 * one or more sequences end to end. Token n attends to tokens `segStart[n]`..n of its own row
 * (its own sequence, causally); `positions[n]` is its position within its sequence.
 */
export interface AttentionLayout {
  readonly rows: number
  readonly seqLen: number
  readonly heads: number
  readonly headDim: number
  readonly positions: Int32Array
  readonly segStart: Int32Array
  readonly rope: RopeTable | undefined
  /** Keep what the backward pass needs (false: forward only, nothing is kept). */
  readonly training: boolean
}

/** Causal self-attention over q, k, v [N, d] → [N, d] (rotary embedding applied if `rope`). */
export const attention = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, layout: AttentionLayout): tf.Tensor2D =>
  isWasm() ? attentionRank2(q, k, v, layout) : attentionReference(q, k, v, layout)

/** Additive mask [rows, 1, T, T]: 0 where attention is allowed, -1e9 elsewhere. */
const additiveMask = (layout: AttentionLayout): Float32Array => {
  const { rows, seqLen: T, segStart } = layout
  const mask = new Float32Array(rows * T * T).fill(-1e9)
  for (let b = 0; b < rows; b++) {
    for (let i = 0; i < T; i++) {
      const start = segStart[b * T + i]!
      mask.fill(0, (b * T + i) * T + start, (b * T + i) * T + i + 1)
    }
  }
  return mask
}

/** Attention written with plain tfjs ops: batched matmuls, softmax, autodiff. */
export const attentionReference = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, layout: AttentionLayout): tf.Tensor2D =>
  tf.tidy(() => {
    const { rows: B, seqLen: T, heads: H, headDim: hd } = layout
    const rope = (x: tf.Tensor2D) => (layout.rope === undefined ? x : ropeTf(x, layout.positions, H, layout.rope))
    const split = (x: tf.Tensor2D) => tf.transpose(tf.reshape(x, [B, T, H, hd]), [0, 2, 1, 3]) // [B, H, T, hd]
    const qh = split(rope(q))
    const kh = split(rope(k))
    const vh = split(v)
    const scores = tf.add(tf.mul(tf.matMul(qh, kh, false, true), 1 / Math.sqrt(hd)), tf.tensor4d(additiveMask(layout), [B, 1, T, T]))
    const out = tf.matMul(tf.softmax(scores), vh) // [B, H, T, hd]
    return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [B * T, H * hd])
  })

/**
 * x [B·T, H·hd] (token-major) → [B, H, T, hd] (head-major), or [B, H, hd, T] when `transposed`,
 * so that every (row, head) block is a contiguous [T, hd] or [hd, T] matrix.
 */
const toHeads = (x: Float32Array, out: Float32Array, B: number, T: number, H: number, hd: number, transposed: boolean): Float32Array => {
  const d = H * hd
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const block = (b * H + h) * T * hd
      for (let t = 0; t < T; t++) {
        const src = (b * T + t) * d + h * hd
        if (transposed) for (let i = 0; i < hd; i++) out[block + i * T + t] = x[src + i]!
        else for (let i = 0; i < hd; i++) out[block + t * hd + i] = x[src + i]!
      }
    }
  }
  return out
}

/** The inverse of `toHeads`. */
const fromHeads = (x: Float32Array, out: Float32Array, B: number, T: number, H: number, hd: number, transposed: boolean): Float32Array => {
  const d = H * hd
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const block = (b * H + h) * T * hd
      for (let t = 0; t < T; t++) {
        const dst = (b * T + t) * d + h * hd
        if (transposed) for (let i = 0; i < hd; i++) out[dst + i] = x[block + i * T + t]!
        else for (let i = 0; i < hd; i++) out[dst + i] = x[block + t * hd + i]!
      }
    }
  }
  return out
}

/** `a·b` for [rows, inner]·[inner, cols] blocks held in JS, written into `out`. */
const blockMatmul = (a: tf.Tensor2D, b: Float32Array, bShape: [number, number], out: Float32Array): void => {
  const tb = upload<tf.Rank.R2>(b, bShape)
  const tc = tf.matMul(a, tb)
  out.set(view(tc))
  tf.dispose([tb, tc])
}

/** Copies the scores s [T, T] of one (row, head) into its block of `all`, -∞ outside each token's window. */
const maskScores = (s: Float32Array, all: Float32Array, block: number, segStart: Int32Array, rowOffset: number, T: number): void => {
  for (let i = 0; i < T; i++) {
    const o = block + i * T
    const start = segStart[rowOffset + i]!
    all.fill(-Infinity, o, o + start)
    for (let j = start; j <= i; j++) all[o + j] = s[i * T + j]!
    all.fill(-Infinity, o + i + 1, o + T)
  }
}

/** dS = P ⊙ (dP − rowsum(dP ⊙ P)) over each token's window, 0 elsewhere. */
const softmaxBackward = (p: Float32Array, dp: Float32Array, ds: Float32Array, segStart: Int32Array, rowOffset: number, T: number): void => {
  ds.fill(0)
  for (let i = 0; i < T; i++) {
    const start = segStart[rowOffset + i]!
    const o = i * T
    let dot = 0
    for (let j = start; j <= i; j++) dot += dp[o + j]! * p[o + j]!
    for (let j = start; j <= i; j++) ds[o + j] = p[o + j]! * (dp[o + j]! - dot)
  }
}

const scaleInPlace = (x: Float32Array, s: number): void => {
  for (let i = 0; i < x.length; i++) x[i]! *= s
}

interface AttentionSaved {
  readonly qh: Float32Array // rotated, scaled q, [B, H, T, hd]
  readonly kh: Float32Array // rotated k, [B, H, T, hd]
  readonly vh: Float32Array // [B, H, T, hd]
  readonly probs: Float32Array // [B, H, T, T]
}

/** Forward: per (row, head) S = Q·Kᵀ, one masked softmax over all of them, then O = P·V. */
const attentionForward = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, layout: AttentionLayout): { value: tf.Tensor2D; saved: AttentionSaved } => {
  const { rows: B, seqLen: T, heads: H, headDim: hd, segStart } = layout
  const N = B * T
  const d = H * hd
  const block = T * hd
  const tokens = scratch.get("attn-tokens", N * d)
  const qh = pool.take(N * d)
  const kh = pool.take(N * d)
  const vh = pool.take(N * d)
  const probs = pool.take(B * H * T * T)
  const kT = scratch.get("attn-kT", N * d)
  tokens.set(view(q))
  if (layout.rope !== undefined) ropeInPlace(tokens, layout.positions, H, layout.rope)
  scaleInPlace(tokens, 1 / Math.sqrt(hd))
  toHeads(tokens, qh, B, T, H, hd, false)
  tokens.set(view(k))
  if (layout.rope !== undefined) ropeInPlace(tokens, layout.positions, H, layout.rope)
  toHeads(tokens, kh, B, T, H, hd, false)
  toHeads(tokens, kT, B, T, H, hd, true)
  toHeads(view(v), vh, B, T, H, hd, false)

  const s = scratch.get("attn-s", T * T)
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const i = b * H + h
      const tq = upload<tf.Rank.R2>(qh.subarray(i * block, (i + 1) * block), [T, hd])
      blockMatmul(tq, kT.subarray(i * block, (i + 1) * block), [hd, T], s)
      tq.dispose()
      maskScores(s, probs, i * T * T, segStart, b * T, T)
    }
  }
  const scores = upload<tf.Rank.R2>(probs, [B * H * T, T])
  const p = tf.softmax(scores)
  probs.set(view(p))
  tf.dispose([scores, p])

  const oh = scratch.get("attn-oh", N * d)
  for (let i = 0; i < B * H; i++) {
    const tp = upload<tf.Rank.R2>(probs.subarray(i * T * T, (i + 1) * T * T), [T, T])
    blockMatmul(tp, vh.subarray(i * block, (i + 1) * block), [T, hd], oh.subarray(i * block, (i + 1) * block))
    tp.dispose()
  }
  const value = upload<tf.Rank.R2>(fromHeads(oh, tokens, B, T, H, hd, false), [N, d])
  return { value, saved: { qh, kh, vh, probs } }
}

/** Transpose of a square [T, T] block into `out`. */
const transposeSquare = (x: Float32Array, out: Float32Array, T: number): Float32Array => {
  for (let i0 = 0; i0 < T; i0 += 16) {
    const i1 = Math.min(T, i0 + 16)
    for (let j0 = 0; j0 < T; j0 += 16) {
      const j1 = Math.min(T, j0 + 16)
      for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) out[j * T + i] = x[i * T + j]!
    }
  }
  return out
}

/**
 * Backward per (row, head): dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax backward, dQ = dS·K,
 * dK = dSᵀ·Q. The [T, T] operand is always the left one: XNNPACK packs the right operand per
 * call, which is cheap for a [T, hd] block and costly for a [T, T] one.
 */
const attentionBackward = (dy: tf.Tensor2D, saved: AttentionSaved, layout: AttentionLayout): Array<tf.Tensor> => {
  const { rows: B, seqLen: T, heads: H, headDim: hd, segStart } = layout
  const { qh, kh, vh, probs } = saved
  const N = B * T
  const d = H * hd
  const block = T * hd
  const tokens = scratch.get("attn-tokens", N * d)
  const doh = scratch.get("attn-doh", N * d)
  const vT = scratch.get("attn-vT", N * d)
  const dqh = scratch.get("attn-dqh", N * d)
  const dkh = scratch.get("attn-dkh", N * d)
  const dvh = scratch.get("attn-dvh", N * d)
  const square = scratch.get("attn-square", T * T)
  const dp = scratch.get("attn-dp", T * T)
  const ds = scratch.get("attn-ds", T * T)
  tokens.set(view(dy))
  toHeads(tokens, doh, B, T, H, hd, false)
  fromHeads(vh, tokens, B, T, H, hd, false)
  toHeads(tokens, vT, B, T, H, hd, true)
  const left = (x: Float32Array, rows: number, cols: number) => upload<tf.Rank.R2>(x, [rows, cols])
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const i = b * H + h
      const blk = (x: Float32Array) => x.subarray(i * block, (i + 1) * block)
      const p = probs.subarray(i * T * T, (i + 1) * T * T)
      const tpT = left(transposeSquare(p, square, T), T, T)
      blockMatmul(tpT, blk(doh), [T, hd], blk(dvh))
      tpT.dispose()
      const tdo = left(blk(doh), T, hd)
      blockMatmul(tdo, blk(vT), [hd, T], dp)
      tdo.dispose()
      softmaxBackward(p, dp, ds, segStart, b * T, T)
      const tds = left(ds, T, T)
      blockMatmul(tds, blk(kh), [T, hd], blk(dqh))
      tds.dispose()
      const tdsT = left(transposeSquare(ds, square, T), T, T)
      blockMatmul(tdsT, blk(qh), [T, hd], blk(dkh))
      tdsT.dispose()
    }
  }
  pool.give(qh, kh, vh, probs)
  const grad = (x: Float32Array, scale: number, rope: boolean): tf.Tensor => {
    fromHeads(x, tokens, B, T, H, hd, false)
    if (scale !== 1) scaleInPlace(tokens, scale)
    if (rope && layout.rope !== undefined) ropeInPlace(tokens, layout.positions, H, layout.rope, true)
    return upload(tokens, [N, d])
  }
  return [grad(dqh, 1 / Math.sqrt(hd), true), grad(dkh, 1, true), grad(dvh, 1, false)]
}

/**
 * The same attention for the wasm backend: every (row, head) product is a rank-2 XNNPACK matmul
 * of [T, hd]/[hd, T]/[T, T] blocks, the softmax is one XNNPACK softmax over all of them, and
 * layout changes, rotary embedding and masking are JS loops over reused buffers. Exactly the
 * math of `attentionReference` (tested to agree, values and gradients).
 */
export const attentionRank2 = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, layout: AttentionLayout): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => {
        const { value, saved } = attentionForward(q, k, v, layout)
        if (!layout.training) pool.give(saved.qh, saved.kh, saved.vh, saved.probs)
        return { value, gradFunc: (dy: tf.Tensor2D) => attentionBackward(dy, saved, layout) }
      }
    ) as (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D
  )(q, k, v)

// ---------------------------------------------------------------------------------------------
// Token log-probabilities

/**
 * log softmax(logits)[target] for every row of logits [N, V] → [N], and the softmax entropy of
 * every row (values only, no gradient). The gradient is (oneHot − softmax)·dy, computed directly.
 */
export const tokenLogprobs = (logits: tf.Tensor2D, targets: Int32Array): { logprobs: tf.Tensor1D; entropy: Float32Array } => {
  let entropy: Float32Array | undefined
  const logprobs = (
    tf.customGrad(
      // @ts-expect-error see matmul
      (z: tf.Tensor2D, save: tf.GradSaveFunc) => {
        const [n, vocab] = z.shape
        const oneHot = tf.tidy(() => tf.oneHot(tf.tensor1d(targets, "int32"), vocab, 1, 0, "int32").toFloat())
        // softmax is one vectorized XNNPACK kernel (exp alone is a slow scalar loop on wasm).
        // log-sum-exp = max − log(softmax at the max): stable, since that probability ≥ 1/V.
        const probs = tf.softmax(z)
        const lse = tf.sub(tf.max(z, -1, true), tf.log(tf.max(probs, -1, true))) // [N, 1]
        const value = tf.sub(tf.sum(tf.mul(z, oneHot), -1), tf.reshape(lse, [n]))
        entropy = new Float32Array(tf.sub(tf.reshape(lse, [n]), tf.sum(tf.mul(probs, z), -1)).dataSync() as Float32Array)
        save([oneHot, probs])
        return {
          value,
          gradFunc: (dy: tf.Tensor1D, saved: Array<tf.Tensor>) => {
            const [oneHot, probs] = saved as [tf.Tensor2D, tf.Tensor2D]
            return [tf.mul(tf.sub(oneHot, probs), tf.reshape(dy, [n, 1]))]
          }
        }
      }
    ) as (z: tf.Tensor2D) => tf.Tensor1D
  )(logits)
  return { logprobs, entropy: entropy! }
}
