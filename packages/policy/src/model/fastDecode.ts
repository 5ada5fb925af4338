/**
 * The decode path the generation engine runs: the transformer's forward pass over plain
 * Float32Arrays, with a KV cache per sequence. For a small model tfjs's per-op overhead (tens of
 * ops per layer, each ~10 µs plus allocation) costs more than the arithmetic, so this path makes
 * as few tfjs calls as it can:
 *
 *   dense products   one rank-2 tfjs matmul per layer piece against weight tensors kept on the
 *                    device (on wasm: XNNPACK SIMD, its packed weights cached per tensor; ~15x a
 *                    JS loop); on wasm for a model whose packed copies would not fit, the same
 *                    product in place over the model's own [out, in] matrices (`gemm: "heap"`,
 *                    gemmKernel.ts; LoRA adapters unmerged, added as a rank-r JS loop); or a JS
 *                    dot-product loop over transposed weights (`gemm: "js"`, on the cpu backend)
 *   MLP, ≥ 4 rows    W2·(silu(W1·h) ⊙ W3·h) as one short chain of tfjs ops (vectorized sigmoid)
 *   attention        the SIMD wasm kernels of attentionKernel.ts, over caches in their memory
 *   everything else  norms, rotary embedding, softmax, residuals: JS loops over reused buffers
 *
 * The weights are a snapshot (decodeWeights.ts). This is the inference form of the arithmetic of
 * `Transformer.forward` (the training pass); tests hold both to the float64 reference of the
 * Llama family (test/policy/reference/) and to each other.
 *
 * A forward call takes any number of chunks — a new prompt (prefill) or the last sampled token
 * of a running sequence (decode) — and runs them as one batch: rows of every chunk share each
 * dense product, attention is per row over its own cache.
 */
import * as tf from "@tensorflow/tfjs"
import type { ModelConfig } from "./config.js"
import { addLowRank, type DecodeWeights, KvCache, type LayerWeights, type Matrix } from "./decodeWeights.js"
import { heapGemmNtInto } from "./gemmKernel.js"
import { isWasm, Scratch, upload, view } from "./heap.js"
import { AttentionKernel } from "./attentionKernel.js"
import { type RopeTable, ropeTable, rotateRow } from "./ops.js"

export { DecodeWeights, type GemmKind, KvCache } from "./decodeWeights.js"

/** The next tokens of one sequence: its cache and the ids to append. */
export interface Chunk {
  readonly cache: KvCache
  readonly ids: Int32Array
}

export class FastDecoder {
  private readonly scratch = new Scratch()
  private readonly rope: RopeTable
  /**
   * On wasm, the input of every one-row product ([1, in], by `in`), kept and rewritten in place:
   * creating and dropping a tensor per product costs ~15 µs, more than half of a small one-row
   * product's overhead, and decoding one sequence runs five products per layer per token.
   */
  private readonly rowInputs = new Map<number, tf.Tensor2D>()
  /** With in-place products (`gemm: "heap"`), the output of every one-row product ([1, out], by `out`), likewise. */
  private readonly rowOutputs = new Map<number, tf.Tensor2D>()

  private readonly kernel: AttentionKernel
  /** Kernel-memory scratch: the current query row, its scores, one head's output. */
  private readonly qAt: number
  private readonly scoresAt: number
  private readonly outAt: number

  /**
   * `kvBytes` bounds the kernel memory the KV caches and the decoder's scratch live in (default
   * and most: wasm32's 4 GiB).
   */
  constructor(private weights: DecodeWeights, options: { readonly kvBytes?: number } = {}) {
    const c = weights.config
    this.rope = ropeTable(c.contextLength, c.headDim, c.ropeTheta, c.ropeScaling)
    // The SIMD kernels work on 4-float groups.
    this.kernel = new AttentionKernel({ simd: c.headDim % 4 === 0, ...(options.kvBytes !== undefined ? { maxBytes: options.kvBytes } : {}) })
    this.qAt = this.kernel.alloc(c.qDim)
    this.scoresAt = this.kernel.alloc(c.contextLength)
    this.outAt = this.kernel.alloc(c.headDim)
  }

  /** True when attention runs on the wasm SIMD kernels (else their JS fallback). */
  get simd(): boolean {
    return this.kernel.simd
  }

  get config(): ModelConfig {
    return this.weights.config
  }

  get version(): number {
    return this.weights.version
  }

  /** Releases the decoder's own tensors (not the weights, which the caller owns). */
  dispose(): void {
    tf.dispose([...this.rowInputs.values(), ...this.rowOutputs.values()])
    this.rowInputs.clear()
    this.rowOutputs.clear()
  }

  /** Switches to new weights (the caller disposes the old ones when nothing uses them). */
  setWeights(weights: DecodeWeights): void {
    this.weights = weights
  }

  /** A cache for up to `capacity` tokens (rounded up to 64, so freed caches get reused). Throws when the memory is full. */
  newCache(capacity = this.config.contextLength): KvCache {
    const cache = this.tryNewCache(capacity)
    if (cache === undefined) {
      throw new Error(`the KV memory cannot hold a cache of ${capacity} tokens now (${this.maxCacheTokens} tokens at most, when no other cache is live)`)
    }
    return cache
  }

  /** A cache for up to `capacity` tokens, or undefined while the other caches leave no room for it. */
  tryNewCache(capacity = this.config.contextLength): KvCache | undefined {
    const c = this.config
    const rounded = Math.min(c.contextLength, Math.ceil(Math.max(1, capacity) / 64) * 64)
    const offset = this.kernel.allocRegion(KvCache.floats(rounded, c.nLayers, c.kvDim))
    return offset === undefined ? undefined : new KvCache(rounded, offset, c.kvDim)
  }

  /** The most tokens one cache can hold: the model's context, or less when the KV memory is smaller. */
  get maxCacheTokens(): number {
    const c = this.config
    const perToken = KvCache.floats(1, c.nLayers, c.kvDim) * 4
    const fits = Math.floor(this.kernel.regionLimit / perToken)
    return fits >= c.contextLength ? c.contextLength : Math.floor(fits / 64) * 64
  }

  /** Returns a cache's memory (the cache must not be used afterwards). */
  freeCache(cache: KvCache): void {
    const c = this.config
    this.kernel.free(cache.offset, KvCache.floats(cache.capacity, c.nLayers, c.kvDim))
  }

  /**
   * Appends every chunk's ids to its cache and returns logits, row-major [rows, vocab]: one row
   * per chunk (its last token) with `logits: "last"`, or one per id with `"all"`. With
   * `reuse: true` the result is a buffer the next call overwrites (no allocation per step).
   */
  forward(chunks: ReadonlyArray<Chunk>, logits: "last" | "all" = "last", reuse = false): Float32Array {
    const c = this.config
    const w = this.weights
    const d = c.dModel
    let R = 0
    for (const ch of chunks) {
      if (ch.ids.length === 0) throw new Error("empty chunk")
      if (ch.cache.length + ch.ids.length > ch.cache.capacity) {
        throw new Error(`sequence of ${ch.cache.length + ch.ids.length} tokens exceeds its cache of ${ch.cache.capacity}`)
      }
      R += ch.ids.length
    }
    // Embeddings.
    const x = this.scratch.get("x", R * d)
    const table = w.embeddings() // a view: used before any tfjs call
    let r = 0
    for (const ch of chunks) {
      for (let i = 0; i < ch.ids.length; i++, r++) {
        const id = ch.ids[i]!
        if (id < 0 || id >= c.vocabSize) throw new Error(`token id ${id} is outside the vocabulary of ${c.vocabSize}`)
        x.set(table.subarray(id * d, id * d + d), r * d)
      }
    }
    const h = this.scratch.get("h", R * d)
    for (let l = 0; l < c.nLayers; l++) {
      const layer = w.layers[l]!
      this.norm(x, h, R, layer.attnNorm)
      const qkv = this.gemm(h, R, layer.qkv, "qkv")
      if (layer.qkvBias !== undefined) addRows(qkv, R, layer.qkvBias)
      if (layer.qNorm !== undefined) this.headNorms(qkv, R, layer)
      const att = this.attend(qkv, chunks, l)
      const o = this.gemm(att, R, layer.wo, "o")
      if (layer.woBias !== undefined) addRows(o, R, layer.woBias)
      this.addInto(x, o)
      this.norm(x, h, R, layer.mlpNorm)
      this.addInto(x, this.mlp(h, R, layer))
    }
    for (const ch of chunks) ch.cache.length += ch.ids.length
    // Head over the rows whose logits are wanted.
    const rows = logits === "all" ? R : chunks.length
    const sel = this.scratch.get("sel", rows * d)
    if (logits === "all") sel.set(x.subarray(0, R * d))
    else {
      let end = 0
      chunks.forEach((ch, i) => {
        end += ch.ids.length
        sel.set(x.subarray((end - 1) * d, end * d), i * d)
      })
    }
    const hs = this.scratch.get("hs", rows * d)
    this.norm(sel, hs, rows, w.finalNorm)
    const out = this.gemm(hs, rows, w.head, "logits")
    return reuse ? out : out.slice()
  }

  /** RMSNorm of every row of x [R, d] into out. */
  private norm(x: Float32Array, out: Float32Array, R: number, weight: Float32Array): void {
    const d = this.config.dModel
    for (let r = 0; r < R; r++) rmsNormInto(x, out, r * d, d, weight, this.config.normEps)
  }

  /** Qwen3's RMSNorm of every query and key head of qkv [R, qDim + 2·kvDim], in place. */
  private headNorms(qkv: Float32Array, R: number, layer: LayerWeights): void {
    const c = this.config
    const hd = c.headDim
    const width = c.qDim + 2 * c.kvDim
    for (let r = 0; r < R; r++) {
      for (let h = 0; h < c.nHeads + c.kvHeads; h++) {
        rmsNormInto(qkv, qkv, r * width + h * hd, hd, h < c.nHeads ? layer.qNorm! : layer.kNorm!, c.normEps)
      }
    }
  }

  private addInto(x: Float32Array, y: Float32Array): void {
    for (let i = 0; i < y.length; i++) x[i]! += y[i]!
  }

  /**
   * W2·(silu(W1·h) ⊙ W3·h) for R rows. With device matrices and several rows the whole MLP runs
   * as tfjs ops (XNNPACK's vectorized sigmoid beats a JS Math.exp loop once there are a few rows);
   * otherwise the activation is a JS loop between the gemms.
   */
  private mlp(h: Float32Array, R: number, layer: LayerWeights): Float32Array {
    const ff = this.config.dFf
    const d = this.config.dModel
    if (this.weights.gemm === "tfjs" && R >= 4) {
      const out = this.scratch.get("gemm-m", R * d)
      const y = tf.tidy(() => {
        const x = upload<tf.Rank.R2>(h.subarray(0, R * d), [R, d])
        const a = tf.matMul(x, layer.w1.tensor!)
        return tf.matMul(tf.mul(tf.mul(a, tf.sigmoid(a)), tf.matMul(x, layer.w3.tensor!)), layer.w2.tensor!)
      })
      out.set(view(y))
      y.dispose()
      return out
    }
    const u = this.gemm(h, R, layer.w1, "u")
    const g = this.gemm(h, R, layer.w3, "g")
    const act = this.scratch.get("act", R * ff)
    for (let i = 0; i < R * ff; i++) {
      const a = u[i]!
      act[i] = (a / (1 + Math.exp(-a))) * g[i]!
    }
    return this.gemm(act, R, layer.w2, "m")
  }

  /**
   * Rotates and stores every row's key and value in its cache, then attends each row's query to
   * its cache up to its own position. qkv is [R, qDim + 2·kvDim] = [q | k | v]; query head h
   * reads key/value head h / (nHeads / kvHeads).
   */
  private attend(qkv: Float32Array, chunks: ReadonlyArray<Chunk>, l: number): Float32Array {
    const c = this.config
    const qd = c.qDim
    const kvd = c.kvDim
    const width = qd + 2 * kvd
    const H = c.nHeads
    const KV = c.kvHeads
    const group = H / KV
    const hd = c.headDim
    const scale = 1 / Math.sqrt(hd)
    let R = 0
    for (const ch of chunks) R += ch.ids.length
    const out = this.scratch.get("att", R * qd)
    const m = this.kernel.f32()
    // Float indices with `>>> 2`: byte addresses above 2 GiB are negative as int32.
    const q = this.qAt >>> 2
    const scores = this.scoresAt >>> 2
    const head = this.outAt >>> 2
    let r = 0
    for (const ch of chunks) {
      const keys = ch.cache.keys(l)
      const values = ch.cache.values(l)
      // Store this chunk's keys and values first: each row attends to the ones before it.
      const headStride = ch.cache.capacity * hd // floats between two heads of a layer
      for (let i = 0; i < ch.ids.length; i++) {
        const pos = ch.cache.length + i
        const src = (r + i) * width
        rotateRow(qkv, src + qd, pos, KV, this.rope)
        for (let h = 0; h < KV; h++) {
          const at = h * headStride + pos * hd
          m.set(qkv.subarray(src + qd + h * hd, src + qd + (h + 1) * hd), (keys >>> 2) + at)
          m.set(qkv.subarray(src + qd + kvd + h * hd, src + qd + kvd + (h + 1) * hd), (values >>> 2) + at)
        }
      }
      for (let i = 0; i < ch.ids.length; i++, r++) {
        const pos = ch.cache.length + i
        m.set(qkv.subarray(r * width, r * width + qd), q)
        rotateRow(m, q, pos, H, this.rope)
        for (let t = 0; t < qd; t++) m[q + t]! *= scale
        for (let h = 0; h < H; h++) {
          // scores = q_h·K_gᵀ over positions 0..pos, softmax, then Σ p·V_g (g: h's kv head).
          const base = Math.floor(h / group) * headStride * 4
          this.kernel.dotRows(this.qAt + h * hd * 4, keys + base, pos + 1, hd * 4, hd * 4, this.scoresAt)
          softmaxInPlace(m, scores, pos + 1)
          this.kernel.axpyRows(this.scoresAt, values + base, pos + 1, hd * 4, hd * 4, this.outAt)
          out.set(m.subarray(head, head + hd), r * qd + h * hd)
        }
      }
    }
    return out
  }

  /** x [R, in] · m [in, out] → a scratch buffer [R, out] (valid until the next call with `name`). */
  private gemm(x: Float32Array, R: number, m: Matrix, name: string): Float32Array {
    const out = this.scratch.get(`gemm-${name}`, R * m.cols)
    if (m.parts !== undefined) {
      this.heapProduct(x, R, m, out)
      return out
    }
    if (m.tensor !== undefined) {
      const tx = this.inputRows(x, R, m.rows)
      const ty = tf.matMul(tx, m.tensor)
      out.set(view(ty))
      ty.dispose()
      if (R !== 1 || !isWasm()) tx.dispose()
      return out
    }
    const wt = m.transposed!
    const K = m.rows
    const N = m.cols
    for (let i = 0; i < R; i++) {
      const xo = i * K
      for (let j = 0; j < N; j++) {
        const wo = j * K
        let s = 0
        for (let k = 0; k < K; k++) s += x[xo + k]! * wt[wo + k]!
        out[i * N + j] = s
      }
    }
    return out
  }

  /** x's R rows of `width` as a tensor: for one row on wasm a kept one, rewritten (the caller disposes the others). */
  private inputRows(x: Float32Array, R: number, width: number): tf.Tensor2D {
    if (R !== 1 || !isWasm()) return upload<tf.Rank.R2>(x.subarray(0, R * width), [R, width])
    let tx = this.rowInputs.get(width)
    if (tx === undefined) this.rowInputs.set(width, (tx = tf.fill([1, width], 0) as tf.Tensor2D))
    view(tx).set(x.subarray(0, width))
    return tx
  }

  /**
   * x·m in place on the wasm heap (gemmKernel.ts), each of m's parts ([out_i, in]) into its
   * columns, then m's unmerged LoRA updates (decodeWeights.ts). One row reuses kept input and
   * output tensors: nothing allocated per product.
   */
  private heapProduct(x: Float32Array, R: number, m: Matrix, out: Float32Array): void {
    const parts = m.parts!
    const tx = this.inputRows(x, R, m.rows)
    let ty = R === 1 ? this.rowOutputs.get(m.cols) : undefined
    if (R === 1 && ty === undefined) this.rowOutputs.set(m.cols, (ty = tf.fill([1, m.cols], 0) as tf.Tensor2D))
    ty ??= tf.zeros([R, m.cols]) as tf.Tensor2D
    let column = 0
    for (const part of parts) {
      heapGemmNtInto(tx, part, ty, parts.length === 1 ? undefined : column)
      column += part.shape[0]
    }
    out.set(view(ty))
    if (R !== 1) tf.dispose([tx, ty])
    for (const u of m.lowRank ?? []) addLowRank(x, R, m.rows, u, out, m.cols, this.scratch.get("low-rank", u.rank))
  }
}

/** RMSNorm of x[o .. o + n) into out[o .. o + n) (which may be x), scaled by `weight`. */
const rmsNormInto = (x: Float32Array, out: Float32Array, o: number, n: number, weight: Float32Array, eps: number): void => {
  let sq = 0
  for (let j = 0; j < n; j++) sq += x[o + j]! * x[o + j]!
  const inv = 1 / Math.sqrt(sq / n + eps)
  for (let j = 0; j < n; j++) out[o + j] = x[o + j]! * inv * weight[j]!
}

/** Adds `bias` [cols] to every one of the R rows of x. */
const addRows = (x: Float32Array, R: number, bias: Float32Array): void => {
  const n = bias.length
  for (let r = 0; r < R; r++) for (let j = 0; j < n; j++) x[r * n + j]! += bias[j]!
}

/** Softmax of m[at .. at + n) in place. */
const softmaxInPlace = (m: Float32Array, at: number, n: number): void => {
  let max = -Infinity
  for (let j = 0; j < n; j++) if (m[at + j]! > max) max = m[at + j]!
  let sum = 0
  for (let j = 0; j < n; j++) {
    const e = Math.exp(m[at + j]! - max)
    m[at + j] = e
    sum += e
  }
  const inv = 1 / sum
  for (let j = 0; j < n; j++) m[at + j]! *= inv
}
