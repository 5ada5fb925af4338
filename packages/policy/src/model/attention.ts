/**
 * Causal self-attention of the training pass, over packed rows of sequences, with its gradient.
 * On the wasm backend every (row, head) product is a rank-2 XNNPACK matmul (the only fast matmul
 * there, see ops.ts) and layout changes, rotary embedding and masking are JS loops over reused
 * buffers; elsewhere plain tfjs ops with autodiff (`attentionReference`), which the wasm path is
 * tested to agree with, values and gradients (test/policy/model.test.ts).
 */
import * as tf from "@tensorflow/tfjs"
import { backward, BufferPool, isWasm, Scratch, upload, view } from "./heap.js"
import { type RopeTable, ropeInPlace, ropeTf } from "./ops.js"
import { transposeInto } from "./transpose.js"

const scratch = new Scratch()
const pool = new BufferPool()

/** Index, within its row, of the first token of each token's sequence. */
export const segmentStarts = (rows: number, seqLen: number, segments: Int32Array): Int32Array => {
  const start = new Int32Array(rows * seqLen)
  for (let b = 0; b < rows; b++) {
    let s = 0
    for (let t = 0; t < seqLen; t++) {
      const n = b * seqLen + t
      if (t > 0 && segments[n] !== segments[n - 1]) s = t
      start[n] = s
    }
  }
  return start
}

/**
 * Where a batch's tokens sit: `rows` rows of `seqLen` tokens (N = rows·seqLen), each row holding
 * one or more sequences end to end. Token n attends to tokens `segStart[n]`..n of its own row
 * (its own sequence, causally); `positions[n]` is its position within its sequence.
 */
export interface AttentionLayout {
  readonly rows: number
  readonly seqLen: number
  readonly heads: number
  /**
   * Key/value heads (grouped-query attention; default `heads`): query head h reads kv head
   * h / (heads / kvHeads). k and v come with these heads only, never repeated in memory.
   */
  readonly kvHeads?: number
  readonly headDim: number
  readonly positions: Int32Array
  readonly segStart: Int32Array
  readonly rope: RopeTable
  /** Keep what the backward pass needs (false: forward only, nothing is kept). */
  readonly training: boolean
}

/** Causal self-attention over q [N, d], k and v [N, kvHeads·hd] → [N, d], the rotary embedding applied to q and k. */
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
    const KV = layout.kvHeads ?? H
    const rope = (x: tf.Tensor2D, heads: number) => ropeTf(x, layout.positions, heads, layout.rope)
    // Each kv head repeated for the query heads that share it.
    const repeat = (x: tf.Tensor2D): tf.Tensor2D => (KV === H ? x : tf.reshape(tf.tile(tf.reshape(x, [B * T, KV, 1, hd]), [1, 1, H / KV, 1]), [B * T, H * hd]))
    const split = (x: tf.Tensor2D) => tf.transpose(tf.reshape(x, [B, T, H, hd]), [0, 2, 1, 3]) // [B, H, T, hd]
    const qh = split(rope(q, H))
    const kh = split(repeat(rope(k, KV)))
    const vh = split(repeat(v))
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

/** `a·b` for [rows, inner]·[inner, cols] blocks held in JS, written into `out` (added to it with `accumulate`). */
const blockMatmul = (a: tf.Tensor2D, b: Float32Array, bShape: [number, number], out: Float32Array, accumulate = false): void => {
  const tb = upload<tf.Rank.R2>(b, bShape)
  const tc = tf.matMul(a, tb)
  if (accumulate) {
    const c = view(tc)
    for (let i = 0; i < out.length; i++) out[i]! += c[i]!
  } else out.set(view(tc))
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
  readonly kh: Float32Array // rotated k, [B, KV, T, hd]
  readonly vh: Float32Array // [B, KV, T, hd]
  readonly probs: Float32Array // [B, H, T, T]
}

/** Forward: per (row, head) S = Q·Kᵀ, one masked softmax over all of them, then O = P·V. */
const attentionForward = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, layout: AttentionLayout): { value: tf.Tensor2D; saved: AttentionSaved } => {
  const { rows: B, seqLen: T, heads: H, headDim: hd, segStart } = layout
  const KV = layout.kvHeads ?? H
  const N = B * T
  const d = H * hd
  const kvd = KV * hd
  const block = T * hd
  const tokens = scratch.get("attn-tokens", N * d)
  const kvTokens = tokens.subarray(0, N * kvd)
  const qh = pool.take(N * d)
  const kh = pool.take(N * kvd)
  const vh = pool.take(N * kvd)
  const probs = pool.take(B * H * T * T)
  const kT = scratch.get("attn-kT", N * kvd)
  tokens.set(view(q))
  ropeInPlace(tokens, layout.positions, H, layout.rope)
  scaleInPlace(tokens, 1 / Math.sqrt(hd))
  toHeads(tokens, qh, B, T, H, hd, false)
  kvTokens.set(view(k))
  ropeInPlace(kvTokens, layout.positions, KV, layout.rope)
  toHeads(kvTokens, kh, B, T, KV, hd, false)
  toHeads(kvTokens, kT, B, T, KV, hd, true)
  toHeads(view(v), vh, B, T, KV, hd, false)

  const s = scratch.get("attn-s", T * T)
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const i = b * H + h
      const j = b * KV + Math.floor((h * KV) / H) // its kv head
      const tq = upload<tf.Rank.R2>(qh.subarray(i * block, (i + 1) * block), [T, hd])
      blockMatmul(tq, kT.subarray(j * block, (j + 1) * block), [hd, T], s)
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
    const j = Math.floor(i / H) * KV + Math.floor(((i % H) * KV) / H)
    const tp = upload<tf.Rank.R2>(probs.subarray(i * T * T, (i + 1) * T * T), [T, T])
    blockMatmul(tp, vh.subarray(j * block, (j + 1) * block), [T, hd], oh.subarray(i * block, (i + 1) * block))
    tp.dispose()
  }
  const value = upload<tf.Rank.R2>(fromHeads(oh, tokens, B, T, H, hd, false), [N, d])
  return { value, saved: { qh, kh, vh, probs } }
}

/**
 * Backward per (row, head): dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax backward, dQ = dS·K,
 * dK = dSᵀ·Q; the query heads sharing a kv head add up into its dK and dV. The [T, T] operand
 * is always the left one: XNNPACK packs the right operand per call, which is cheap for a
 * [T, hd] block and costly for a [T, T] one.
 */
const attentionBackward = (dy: tf.Tensor2D, saved: AttentionSaved, layout: AttentionLayout): Array<tf.Tensor> => {
  const { rows: B, seqLen: T, heads: H, headDim: hd, segStart } = layout
  const KV = layout.kvHeads ?? H
  const { qh, kh, vh, probs } = saved
  const N = B * T
  const d = H * hd
  const kvd = KV * hd
  const block = T * hd
  const tokens = scratch.get("attn-tokens", N * d)
  const doh = scratch.get("attn-doh", N * d)
  const vT = scratch.get("attn-vT", N * kvd)
  const dqh = scratch.get("attn-dqh", N * d)
  const dkh = scratch.get("attn-dkh", N * kvd).fill(0)
  const dvh = scratch.get("attn-dvh", N * kvd).fill(0)
  const square = scratch.get("attn-square", T * T)
  const dp = scratch.get("attn-dp", T * T)
  const ds = scratch.get("attn-ds", T * T)
  tokens.set(view(dy))
  toHeads(tokens, doh, B, T, H, hd, false)
  fromHeads(vh, tokens, B, T, KV, hd, false)
  toHeads(tokens, vT, B, T, KV, hd, true)
  const left = (x: Float32Array, rows: number, cols: number) => upload<tf.Rank.R2>(x, [rows, cols])
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const i = b * H + h
      const j = b * KV + Math.floor((h * KV) / H) // its kv head
      const blk = (x: Float32Array) => x.subarray(i * block, (i + 1) * block)
      const kvBlk = (x: Float32Array) => x.subarray(j * block, (j + 1) * block)
      const p = probs.subarray(i * T * T, (i + 1) * T * T)
      transposeInto(p, square, T, T)
      const tpT = left(square, T, T)
      blockMatmul(tpT, blk(doh), [T, hd], kvBlk(dvh), true)
      tpT.dispose()
      const tdo = left(blk(doh), T, hd)
      blockMatmul(tdo, kvBlk(vT), [hd, T], dp)
      tdo.dispose()
      softmaxBackward(p, dp, ds, segStart, b * T, T)
      const tds = left(ds, T, T)
      blockMatmul(tds, kvBlk(kh), [T, hd], blk(dqh))
      tds.dispose()
      transposeInto(ds, square, T, T)
      const tdsT = left(square, T, T)
      blockMatmul(tdsT, blk(qh), [T, hd], kvBlk(dkh), true)
      tdsT.dispose()
    }
  }
  pool.give(qh, kh, vh, probs)
  const grad = (x: Float32Array, heads: number, scale: number, rope: boolean): tf.Tensor => {
    const out = tokens.subarray(0, N * heads * hd)
    fromHeads(x, out, B, T, heads, hd, false)
    if (scale !== 1) scaleInPlace(out, scale)
    if (rope) ropeInPlace(out, layout.positions, heads, layout.rope, true)
    return upload(out, [N, heads * hd])
  }
  return [grad(dqh, H, 1 / Math.sqrt(hd), true), grad(dkh, KV, 1, true), grad(dvh, KV, 1, false)]
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
        return { value, gradFunc: (dy: tf.Tensor2D) => backward(dy, [], () => attentionBackward(dy, saved, layout)) }
      }
    ) as (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D
  )(q, k, v)
