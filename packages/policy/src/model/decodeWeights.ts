/**
 * What the fast decoder (fastDecode.ts) reads: a snapshot of a model's weights in its layout
 * (q, k and v as one matrix; each matrix on the device for a tfjs matmul or an in-place
 * product, or transposed for a JS loop), and the KV cache of one sequence. A snapshot is taken
 * after each update, so training can change the variables while the engine keeps decoding the
 * version it announced.
 *
 * With in-place products ("heap": models whose weights barely fit the wasm heap) a snapshot adds
 * nothing the size of a weight: the matrices are the model's own, [out, in] as it holds them;
 * q, k and v stay three matrices side by side (no fused copy), a tied head is the embedding
 * table itself, and LoRA adapters stay unmerged — each adapted
 * product adds scale·(x·A)·B, a rank-r correction (~1% of the product's work at rank 8),
 * instead of a merged copy of every adapted matrix.
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import type { MatrixLayout } from "./matrixLayout.js"
import { multipliesInPlace } from "./gemmKernel.js"
import { isWasm, upload, view } from "./heap.js"
import { transpose2d } from "./matmul.js"
import type { Transformer } from "./transformer.js"
import { checkWeights, type Weights } from "./weights.js"

/**
 * How the decoder multiplies: "tfjs" (the backend's matmul; on wasm XNNPACK, which keeps a packed
 * copy of each matrix), "heap" (wasm only: in place on the backend's heap, gemmKernel.ts, for
 * models whose packed copies would not fit), "js" (a JS loop, on the cpu backend).
 */
export type GemmKind = "tfjs" | "heap" | "js"

/** The decoder's default for `config` on the current backend. */
export const defaultGemm = (config: ModelConfig): GemmKind =>
  tf.getBackend() === "cpu" ? "js" : multipliesInPlace(config) ? "heap" : "tfjs"

/** A LoRA update of some of a matrix's columns: out[:, column ..) += scale·(x·a)·b. */
export interface LowRank {
  readonly column: number
  readonly rank: number
  readonly a: Float32Array // [in, rank]
  readonly b: Float32Array // [rank, cols]
  readonly scale: number
}

/** out[:, u.column ..) += u.scale·(x·u.a)·u.b for x [R, n] and out [R, width]; `t` is scratch of u.rank floats. */
export const addLowRank = (x: Float32Array, R: number, n: number, u: LowRank, out: Float32Array, width: number, t: Float32Array): void => {
  const r = u.rank
  const cols = u.b.length / r
  for (let i = 0; i < R; i++) {
    t.fill(0)
    for (let k = 0; k < n; k++) {
      const xv = x[i * n + k]!
      for (let q = 0; q < r; q++) t[q]! += xv * u.a[k * r + q]!
    }
    const o = i * width + u.column
    for (let q = 0; q < r; q++) {
      const s = t[q]! * u.scale
      const b = q * cols
      for (let j = 0; j < cols; j++) out[o + j]! += s * u.b[b + j]!
    }
  }
}

/** A dense matrix of `x·W` (W [in, out]) in the form its Gemm wants. */
export interface Matrix {
  readonly rows: number // in
  readonly cols: number // out
  readonly tensor?: tf.Tensor2D // "tfjs": [in, out] on the device
  readonly parts?: ReadonlyArray<tf.Tensor2D> // "heap": [out_i, in], their outputs side by side, sharing the model's memory
  readonly lowRank?: ReadonlyArray<LowRank> // "heap": LoRA adapters, unmerged
  readonly transposed?: Float32Array // "js": [out, in]
}

export interface LayerWeights {
  readonly attnNorm: Float32Array
  readonly qkv: Matrix // [d, qDim + 2·kvDim]
  readonly qkvBias: Float32Array | undefined
  readonly qNorm: Float32Array | undefined // [hd]
  readonly kNorm: Float32Array | undefined
  readonly wo: Matrix
  readonly woBias: Float32Array | undefined
  readonly mlpNorm: Float32Array
  readonly w1: Matrix // [d, ff], the gate (silu)
  readonly w3: Matrix // [d, ff]
  readonly w2: Matrix
}

/** A snapshot of a model's weights in the layout the fast decoder reads. */
export class DecodeWeights {
  private constructor(
    readonly config: ModelConfig,
    readonly version: number,
    readonly gemm: GemmKind,
    /** The embedding table: on the device (sharing the model's memory) for "tfjs", else a copy. */
    private readonly embeddingTable: tf.Tensor2D | Float32Array,
    readonly layers: ReadonlyArray<LayerWeights>,
    readonly finalNorm: Float32Array,
    readonly head: Matrix
  ) {}

  /**
   * Reads the model's current variables (default gemm: `defaultGemm`). The matrices share the
   * variables' memory: an update assigns a variable new memory, never writes into the old, so
   * the snapshot stays what it was. With LoRA the server decodes with the merged weights
   * (base + scale·A·B, computed on the backend), or with "heap" the base and a copy of the
   * adapters.
   */
  static fromModel(model: Transformer, options: { readonly version?: number; readonly gemm?: GemmKind } = {}): DecodeWeights {
    const version = options.version ?? model.version
    const gemm = options.gemm ?? (model.products === "heap" ? "heap" : defaultGemm(model.config))
    const layout = model.products === "heap" ? "outIn" : "inOut"
    const lora = model.lora
    if (gemm === "heap" && lora !== undefined) {
      const adapters = model.readAdapters()
      const lowRank = (name: string): LowRank | undefined => {
        const a = adapters[`${name}.lora_A`]
        const b = adapters[`${name}.lora_B`]
        return a === undefined || b === undefined ? undefined : { column: 0, rank: lora.rank, a, b, scale: lora.scale }
      }
      return DecodeWeights.build(model.config, (name) => model.params.get(name), layout, version, gemm, undefined, lowRank)
    }
    const merged = model.mergedTensors()
    try {
      // A model multiplied with tfjs keeps its tied head's transpose: the snapshot shares it.
      const head = layout === "inOut" && gemm !== "heap" ? model.headWeight() : undefined
      return DecodeWeights.build(model.config, (name) => merged.get(name) ?? model.params.get(name), layout, version, gemm, head)
    } finally {
      tf.dispose([...merged.values()])
    }
  }

  /** From plain weights (e.g. received from a training device), checked against the config. */
  static fromWeights(config: ModelConfig, weights: Weights, version: number, options: { readonly gemm?: GemmKind } = {}): DecodeWeights {
    checkWeights(parameterShapes(config), weights)
    const shapes = parameterShapes(config)
    const tensors = new Map(Object.keys(shapes).map((name) => [name, upload(weights[name]!, shapes[name]!)] as const))
    try {
      return DecodeWeights.build(config, (name) => tensors.get(name), "inOut", version, options.gemm)
    } finally {
      tf.dispose([...tensors.values()])
    }
  }

  /**
   * `get`: the parameters, each linear matrix in `layout`; `head`: the head as [d, vocab] when
   * the caller has it (a model keeps its tied embedding's transpose); `lowRank`: a matrix's
   * unmerged LoRA update, by parameter name ("heap" only).
   */
  private static build(
    config: ModelConfig,
    get: (name: string) => tf.Tensor | undefined,
    layout: MatrixLayout,
    version: number,
    gemmKind: GemmKind | undefined,
    head?: tf.Tensor2D,
    lowRank?: (name: string) => LowRank | undefined
  ): DecodeWeights {
    const c = config
    const gemm = gemmKind ?? defaultGemm(config)
    const p = (name: string) => {
      const t = get(name)
      if (t === undefined) throw new Error(`no parameter ${name}`)
      return t as tf.Tensor2D
    }
    const transposes: Array<tf.Tensor> = [] // of matrices held in the other layout, dropped at the end
    /** Linear matrix `name` as [in, out] ("inOut") or [out, in]: the parameter itself, or a transpose of it. */
    const held = (name: string, want: MatrixLayout): tf.Tensor2D => {
      if (layout === want) return p(name)
      const t = transpose2d(p(name))
      transposes.push(t)
      return t
    }
    try {
      // One copy out of the wasm heap (dataSync would copy, and a Float32Array of that copy again).
      const values = (name: string) => (isWasm() ? view(p(name)).slice() : new Float32Array(p(name).dataSync() as Float32Array))
      const optional = (name: string) => (get(name) !== undefined ? values(name) : undefined)
      // "heap": the matrices [out, in], their outputs side by side, each with its LoRA update if any.
      const rowsOf = (names: ReadonlyArray<string>): Matrix => {
        const parts = names.map((name) => tf.keep(tf.clone(held(name, "outIn")))) // sharing the variables' memory
        const updates: Array<LowRank> = []
        let column = 0
        names.forEach((name, i) => {
          const u = lowRank?.(name)
          if (u !== undefined) updates.push({ ...u, column })
          column += parts[i]!.shape[0]
        })
        return { rows: parts[0]!.shape[1], cols: column, parts, ...(updates.length > 0 ? { lowRank: updates } : {}) }
      }
      /** An [in, out] matrix for tfjs's matmul (sharing t's memory) or the JS loop (transposed). */
      const matrix = (t: tf.Tensor2D): Matrix => {
        const [rows, cols] = t.shape
        if (gemm !== "js") return { rows, cols, tensor: tf.keep(tf.clone(t)) }
        const tt = transpose2d(t)
        const transposed = new Float32Array(tt.dataSync() as Float32Array)
        tt.dispose()
        return { rows, cols, transposed }
      }
      const layers = Array.from({ length: c.nLayers }, (_, l): LayerWeights => {
        const n = (s: string) => `layers.${l}.${s}`
        const weight = (s: string) => (gemm === "heap" ? rowsOf([n(s)]) : matrix(held(n(s), "inOut")))
        let qkv: Matrix
        if (gemm === "heap") qkv = rowsOf([n("attn.wq"), n("attn.wk"), n("attn.wv")])
        else {
          const fused = tf.concat([held(n("attn.wq"), "inOut"), held(n("attn.wk"), "inOut"), held(n("attn.wv"), "inOut")], 1)
          qkv = matrix(fused)
          fused.dispose()
        }
        const biases = ["attn.bq", "attn.bk", "attn.bv"].map((b) => optional(n(b)))
        return {
          attnNorm: values(n("attn_norm.weight")),
          qkv,
          qkvBias: biases.every((b) => b !== undefined) ? Float32Array.from([...biases[0]!, ...biases[1]!, ...biases[2]!]) : undefined,
          qNorm: optional(n("attn.q_norm.weight")),
          kNorm: optional(n("attn.k_norm.weight")),
          wo: weight("attn.wo"),
          woBias: optional(n("attn.bo")),
          mlpNorm: values(n("mlp_norm.weight")),
          w1: weight("mlp.w1"),
          w3: weight("mlp.w3"),
          w2: weight("mlp.w2")
        }
      })
      let headMatrix: Matrix
      if (gemm === "heap") {
        // [vocab, d]: a tied head is the embedding table itself.
        const rows = c.tieEmbeddings ? p("tok_embeddings.weight") : held("lm_head.weight", "outIn")
        headMatrix = { rows: c.dModel, cols: c.vocabSize, parts: [tf.keep(tf.clone(rows))] }
      } else if (head !== undefined) headMatrix = matrix(head)
      else if (c.tieEmbeddings) {
        const t = transpose2d(p("tok_embeddings.weight"))
        transposes.push(t)
        headMatrix = matrix(t)
      } else headMatrix = matrix(held("lm_head.weight", "inOut"))
      // On wasm the table stays on the device: copying 28M floats (a 49k vocabulary) out costs
      // more than a snapshot's other work, and a lookup reads d floats of it per token.
      const embeddings = gemm !== "js" && isWasm() ? tf.keep(tf.clone(p("tok_embeddings.weight"))) : values("tok_embeddings.weight")
      return new DecodeWeights(c, version, gemm, embeddings, layers, values("norm.weight"), headMatrix)
    } finally {
      tf.dispose(transposes)
    }
  }

  /** The embedding table's values, [vocab, d]; a view of the device's memory, valid until the next tfjs call that allocates. */
  embeddings(): Float32Array {
    return this.embeddingTable instanceof Float32Array ? this.embeddingTable : view(this.embeddingTable)
  }

  /** Releases the device copies of the matrices. */
  dispose(): void {
    if (!(this.embeddingTable instanceof Float32Array)) this.embeddingTable.dispose()
    for (const m of [...this.layers.flatMap((l) => [l.qkv, l.wo, l.w1, l.w3, l.w2]), this.head]) {
      m.tensor?.dispose()
      tf.dispose([...(m.parts ?? [])])
    }
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
