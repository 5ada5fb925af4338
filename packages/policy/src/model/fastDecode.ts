/**
 * The decode path the generation engine runs: the transformer's forward pass over plain
 * Float32Arrays, with a KV cache per sequence. For a small model tfjs's per-op overhead (tens of
 * ops per layer, each ~10 µs plus allocation) costs more than the arithmetic, so this path makes
 * as few tfjs calls as it can:
 *
 *   dense products   one rank-2 tfjs matmul per layer piece against weight tensors kept on the
 *                    device (on wasm: XNNPACK SIMD, its packed weights cached per tensor; ~15x a
 *                    JS loop), or a JS dot-product loop over transposed weights (`gemm: "js"`,
 *                    used on the cpu backend)
 *   MLP, ≥ 4 rows    W1 → GELU/SwiGLU → W2 as one short chain of tfjs ops (vectorized sigmoid)
 *   attention        the SIMD wasm kernels of attentionKernel.ts, over caches in their memory
 *   everything else  norms, rotary embedding, softmax, residuals: JS loops over reused buffers
 *
 * The weights are a snapshot (`DecodeWeights.fromModel`) taken after each update, so training
 * can change the variables while the engine keeps decoding with the version it announced.
 * `Transformer.decode` is the tfjs reference this is tested against (logits within 1e-4).
 *
 * A forward call takes any number of chunks — a new prompt (prefill) or the last sampled token
 * of a running sequence (decode) — and runs them as one batch: rows of every chunk share each
 * dense product, attention is per row over its own cache.
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import { Scratch, upload, view } from "./heap.js"
import { AttentionKernel } from "./attentionKernel.js"
import { type RopeTable, ropeTable } from "./ops.js"
import { checkWeights, type Transformer, type Weights } from "./transformer.js"

export type GemmKind = "tfjs" | "js"

/** A dense [in, out] matrix in the form its Gemm wants. */
interface Matrix {
  readonly rows: number // in
  readonly cols: number // out
  readonly tensor?: tf.Tensor2D // "tfjs": [in, out] on the device
  readonly transposed?: Float32Array // "js": [out, in]
}

interface LayerWeights {
  readonly attnNorm: Float32Array
  readonly attnNormBias: Float32Array | undefined
  readonly qkv: Matrix // [d, qDim + 2·kvDim]
  readonly qkvBias: Float32Array | undefined
  readonly qNorm: Float32Array | undefined // [hd]
  readonly kNorm: Float32Array | undefined
  readonly wo: Matrix
  readonly woBias: Float32Array | undefined
  readonly mlpNorm: Float32Array
  readonly mlpNormBias: Float32Array | undefined
  readonly w1: Matrix // [d, ff]
  readonly w3: Matrix | undefined // [d, ff], swiglu's gate
  readonly w2: Matrix
}

/** A snapshot of a model's weights in the layout the fast decoder reads. */
export class DecodeWeights {
  private constructor(
    readonly config: ModelConfig,
    readonly version: number,
    readonly gemm: GemmKind,
    readonly embeddings: Float32Array,
    readonly positionEmbeddings: Float32Array | undefined,
    readonly layers: ReadonlyArray<LayerWeights>,
    readonly finalNorm: Float32Array,
    readonly finalNormBias: Float32Array | undefined,
    readonly head: Matrix
  ) {}

  /** Reads the model's current variables (default gemm: "tfjs" unless on the cpu backend). */
  static fromModel(model: Transformer, options: { readonly version?: number; readonly gemm?: GemmKind } = {}): DecodeWeights {
    const version = options.version ?? model.version
    // With LoRA the server decodes with the merged weights (base + scale·A·B).
    if (model.lora !== undefined) return DecodeWeights.fromWeights(model.config, model.servingWeights(), version, options)
    return DecodeWeights.build(model.config, (name) => model.params.get(name), version, options.gemm)
  }

  /** From plain weights (e.g. received from a training device), checked against the config. */
  static fromWeights(config: ModelConfig, weights: Weights, version: number, options: { readonly gemm?: GemmKind } = {}): DecodeWeights {
    checkWeights(parameterShapes(config), weights)
    const shapes = parameterShapes(config)
    const tensors = new Map(Object.keys(shapes).map((name) => [name, upload(weights[name]!, shapes[name]!)] as const))
    try {
      return DecodeWeights.build(config, (name) => tensors.get(name), version, options.gemm)
    } finally {
      tf.dispose([...tensors.values()])
    }
  }

  private static build(config: ModelConfig, get: (name: string) => tf.Tensor | undefined, version: number, gemmKind: GemmKind | undefined): DecodeWeights {
    const c = config
    const gemm = gemmKind ?? (tf.getBackend() === "cpu" ? "js" : "tfjs")
    const p = (name: string) => {
      const t = get(name)
      if (t === undefined) throw new Error(`no parameter ${name}`)
      return t as tf.Tensor2D
    }
    const values = (name: string) => new Float32Array(p(name).dataSync() as Float32Array)
    const optional = (name: string) => (get(name) !== undefined ? values(name) : undefined)
    const matrix = (t: tf.Tensor2D): Matrix => {
      const [rows, cols] = t.shape
      if (gemm === "tfjs") return { rows, cols, tensor: tf.keep(tf.clone(t)) }
      const tt = tf.transpose(t)
      const transposed = new Float32Array(tt.dataSync() as Float32Array)
      tt.dispose()
      return { rows, cols, transposed }
    }
    const layers = Array.from({ length: c.nLayers }, (_, l): LayerWeights => {
      const n = (s: string) => `layers.${l}.${s}`
      const qkv = tf.concat([p(n("attn.wq")), p(n("attn.wk")), p(n("attn.wv"))], 1)
      const biases = ["attn.bq", "attn.bk", "attn.bv"].map((b) => optional(n(b)))
      const layer: LayerWeights = {
        attnNorm: values(n("attn_norm.weight")),
        attnNormBias: optional(n("attn_norm.bias")),
        qkv: matrix(qkv),
        qkvBias: biases.every((b) => b !== undefined) ? Float32Array.from([...biases[0]!, ...biases[1]!, ...biases[2]!]) : undefined,
        qNorm: optional(n("attn.q_norm.weight")),
        kNorm: optional(n("attn.k_norm.weight")),
        wo: matrix(p(n("attn.wo"))),
        woBias: optional(n("attn.bo")),
        mlpNorm: values(n("mlp_norm.weight")),
        mlpNormBias: optional(n("mlp_norm.bias")),
        w1: matrix(p(n("mlp.w1"))),
        w3: c.mlp === "swiglu" ? matrix(p(n("mlp.w3"))) : undefined,
        w2: matrix(p(n("mlp.w2")))
      }
      qkv.dispose()
      return layer
    })
    const headT = c.tieEmbeddings ? tf.transpose(p("tok_embeddings.weight")) : p("lm_head.weight")
    const head = matrix(headT)
    if (c.tieEmbeddings) headT.dispose()
    return new DecodeWeights(
      c,
      version,
      gemm,
      values("tok_embeddings.weight"),
      optional("pos_embeddings.weight"),
      layers,
      values("norm.weight"),
      optional("norm.bias"),
      head
    )
  }

  /** Releases the device copies of the matrices. */
  dispose(): void {
    for (const l of this.layers) for (const m of [l.qkv, l.wo, l.w1, l.w3, l.w2]) m?.tensor?.dispose()
    this.head.tensor?.dispose()
  }
}

/**
 * Keys (rotated) and values of one sequence in its decoder's kernel memory (attentionKernel.ts):
 * a byte offset, not an array, since that memory can grow. Head-major, [heads, capacity, hd] per
 * layer, so the rows one head attends over are contiguous: decoding many sequences reads every
 * cache once per step, which is memory-bound, and sequential reads stream fastest. With
 * grouped-query attention only the key/value heads are cached (`d` = kv heads · hd).
 */
export class KvCache {
  length = 0

  constructor(
    readonly capacity: number,
    /** Byte offset of layer 0's keys; each layer holds keys then values. */
    readonly offset: number,
    private readonly d: number
  ) {}

  /** Floats the cache occupies. */
  static floats(capacity: number, layers: number, d: number): number {
    return capacity * d * 2 * layers
  }

  /** Byte offset of layer l's keys (head h at + h·capacity·hd·4). */
  keys(l: number): number {
    return this.offset + l * 2 * this.capacity * this.d * 4
  }

  values(l: number): number {
    return this.keys(l) + this.capacity * this.d * 4
  }
}

/** The next tokens of one sequence: its cache and the ids to append. */
export interface Chunk {
  readonly cache: KvCache
  readonly ids: Int32Array
}

export class FastDecoder {
  private readonly scratch = new Scratch()
  private readonly rope: RopeTable | undefined

  private readonly kernel: AttentionKernel
  /** Kernel-memory scratch: the current query row, its scores, one head's output. */
  private readonly qAt: number
  private readonly scoresAt: number
  private readonly outAt: number

  constructor(private weights: DecodeWeights) {
    const c = weights.config
    this.rope = c.positions === "rope" ? ropeTable(c.contextLength, c.headDim, c.ropeTheta, c.ropeScaling) : undefined
    // The SIMD kernels work on 4-float groups.
    this.kernel = new AttentionKernel({ simd: c.headDim % 4 === 0 })
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

  /** Switches to new weights (the caller disposes the old ones when nothing uses them). */
  setWeights(weights: DecodeWeights): void {
    this.weights = weights
  }

  /** A cache for up to `capacity` tokens (rounded up to 64, so freed caches get reused). */
  newCache(capacity = this.config.contextLength): KvCache {
    const c = this.config
    const rounded = Math.min(c.contextLength, Math.ceil(Math.max(1, capacity) / 64) * 64)
    return new KvCache(rounded, this.kernel.alloc(KvCache.floats(rounded, c.nLayers, c.kvDim)), c.kvDim)
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
    let r = 0
    for (const ch of chunks) {
      for (let i = 0; i < ch.ids.length; i++, r++) {
        const id = ch.ids[i]!
        if (id < 0 || id >= c.vocabSize) throw new Error(`token id ${id} is outside the vocabulary of ${c.vocabSize}`)
        x.set(w.embeddings.subarray(id * d, id * d + d), r * d)
        if (w.positionEmbeddings !== undefined) {
          const p = (ch.cache.length + i) * d
          for (let j = 0; j < d; j++) x[r * d + j]! += w.positionEmbeddings[p + j]!
        }
      }
    }
    const h = this.scratch.get("h", R * d)
    for (let l = 0; l < c.nLayers; l++) {
      const layer = w.layers[l]!
      this.norm(x, h, R, layer.attnNorm, layer.attnNormBias)
      const qkv = this.gemm(h, R, layer.qkv, "qkv")
      if (layer.qkvBias !== undefined) addRows(qkv, R, layer.qkvBias)
      if (layer.qNorm !== undefined) this.headNorms(qkv, R, layer)
      const att = this.attend(qkv, chunks, l)
      const o = this.gemm(att, R, layer.wo, "o")
      if (layer.woBias !== undefined) addRows(o, R, layer.woBias)
      this.addInto(x, o)
      this.norm(x, h, R, layer.mlpNorm, layer.mlpNormBias)
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
    this.norm(sel, hs, rows, w.finalNorm, w.finalNormBias)
    const out = this.gemm(hs, rows, w.head, "logits")
    return reuse ? out : out.slice()
  }

  /** RMSNorm or LayerNorm of every row of x [R, d] into out. */
  private norm(x: Float32Array, out: Float32Array, R: number, weight: Float32Array, bias: Float32Array | undefined): void {
    const d = this.config.dModel
    const eps = this.config.normEps
    for (let r = 0; r < R; r++) {
      const o = r * d
      let mean = 0
      if (bias !== undefined) {
        for (let j = 0; j < d; j++) mean += x[o + j]!
        mean /= d
      }
      let sq = 0
      for (let j = 0; j < d; j++) {
        const v = x[o + j]! - mean
        sq += v * v
      }
      const inv = 1 / Math.sqrt(sq / d + eps)
      for (let j = 0; j < d; j++) out[o + j] = (x[o + j]! - mean) * inv * weight[j]! + (bias === undefined ? 0 : bias[j]!)
    }
  }

  /** Qwen3's RMSNorm of every query and key head of qkv [R, qDim + 2·kvDim], in place. */
  private headNorms(qkv: Float32Array, R: number, layer: LayerWeights): void {
    const c = this.config
    const hd = c.headDim
    const width = c.qDim + 2 * c.kvDim
    for (let r = 0; r < R; r++) {
      for (let h = 0; h < c.nHeads + c.kvHeads; h++) {
        const o = r * width + h * hd
        const weight = h < c.nHeads ? layer.qNorm! : layer.kNorm!
        let sq = 0
        for (let j = 0; j < hd; j++) sq += qkv[o + j]! * qkv[o + j]!
        const inv = 1 / Math.sqrt(sq / hd + c.normEps)
        for (let j = 0; j < hd; j++) qkv[o + j] = qkv[o + j]! * inv * weight[j]!
      }
    }
  }

  private addInto(x: Float32Array, y: Float32Array): void {
    for (let i = 0; i < y.length; i++) x[i]! += y[i]!
  }

  /**
   * W2·act(W1·h [⊙ W3·h]) for R rows. With device matrices and several rows the whole MLP runs as
   * tfjs ops (XNNPACK's vectorized sigmoid beats a JS Math.exp loop once there are a few rows);
   * otherwise the activation is a JS loop between two gemms.
   */
  private mlp(h: Float32Array, R: number, layer: LayerWeights): Float32Array {
    const ff = this.config.dFf
    const d = this.config.dModel
    const swiglu = this.config.mlp === "swiglu"
    if (layer.w1.tensor !== undefined && R >= 4) {
      const out = this.scratch.get("gemm-m", R * d)
      const y = tf.tidy(() => {
        const x = upload<tf.Rank.R2>(h.subarray(0, R * d), [R, d])
        const a = tf.matMul(x, layer.w1.tensor!)
        const hidden = swiglu ? tf.mul(tf.mul(a, tf.sigmoid(a)), tf.matMul(x, layer.w3!.tensor!)) : tf.mul(a, tf.sigmoid(tf.mul(a, 1.702)))
        return tf.matMul(hidden, layer.w2.tensor!)
      })
      out.set(view(y))
      y.dispose()
      return out
    }
    const u = this.gemm(h, R, layer.w1, "u")
    const act = this.scratch.get("act", R * ff)
    if (!swiglu) {
      for (let i = 0; i < R * ff; i++) {
        const v = u[i]!
        act[i] = v / (1 + Math.exp(-1.702 * v))
      }
    } else {
      const g = this.gemm(h, R, layer.w3!, "g")
      for (let i = 0; i < R * ff; i++) {
        const a = u[i]!
        act[i] = (a / (1 + Math.exp(-a))) * g[i]!
      }
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
    const q = this.qAt >> 2
    const scores = this.scoresAt >> 2
    const head = this.outAt >> 2
    let r = 0
    for (const ch of chunks) {
      const keys = ch.cache.keys(l)
      const values = ch.cache.values(l)
      // Store this chunk's keys and values first: each row attends to the ones before it.
      const headStride = ch.cache.capacity * hd // floats between two heads of a layer
      for (let i = 0; i < ch.ids.length; i++) {
        const pos = ch.cache.length + i
        const src = (r + i) * width
        if (this.rope !== undefined) rotate(qkv, src + qd, pos, KV, this.rope)
        for (let h = 0; h < KV; h++) {
          const at = h * headStride + pos * hd
          m.set(qkv.subarray(src + qd + h * hd, src + qd + (h + 1) * hd), (keys >> 2) + at)
          m.set(qkv.subarray(src + qd + kvd + h * hd, src + qd + kvd + (h + 1) * hd), (values >> 2) + at)
        }
      }
      for (let i = 0; i < ch.ids.length; i++, r++) {
        const pos = ch.cache.length + i
        m.set(qkv.subarray(r * width, r * width + qd), q)
        if (this.rope !== undefined) rotate(m, q, pos, H, this.rope)
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
    if (m.tensor !== undefined) {
      const tx = upload<tf.Rank.R2>(x.subarray(0, R * m.rows), [R, m.rows])
      const ty = tf.matMul(tx, m.tensor)
      out.set(view(ty))
      tf.dispose([tx, ty])
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

/** Rotary embedding of one row (all heads) of `a` starting at `offset`, at position `pos`. */
const rotate = (a: Float32Array | Float64Array, offset: number, pos: number, heads: number, table: RopeTable): void => {
  const half = table.half
  const t = pos * half
  for (let h = 0; h < heads; h++) {
    const o = offset + h * 2 * half
    for (let i = 0; i < half; i++) {
      const c = table.cos[t + i]!
      const s = table.sin[t + i]!
      const x1 = a[o + i]!
      const x2 = a[o + half + i]!
      a[o + i] = x1 * c - x2 * s
      a[o + half + i] = x2 * c + x1 * s
    }
  }
}
