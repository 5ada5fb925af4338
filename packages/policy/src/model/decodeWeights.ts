/**
 * What the fast decoder (fastDecode.ts) reads: a snapshot of a model's weights in its layout
 * (q, k and v fused into one matrix; each matrix on the device for a tfjs matmul or an in-place
 * product, or transposed for a JS loop), and the KV cache of one sequence. A snapshot is taken after each update, so
 * training can change the variables while the engine keeps decoding the version it announced.
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import { heapGemmAvailable } from "./gemmKernel.js"
import { isWasm, upload, view } from "./heap.js"
import { wasmPacksWeights } from "./memory.js"
import { transpose2d } from "./matmul.js"
import { checkWeights, type Transformer, type Weights } from "./transformer.js"

/**
 * How the decoder multiplies: "tfjs" (the backend's matmul; on wasm XNNPACK, which keeps a packed
 * copy of each matrix), "heap" (wasm only: in place on the backend's heap, gemmKernel.ts, for
 * models whose packed copies would not fit), "js" (a JS loop, on the cpu backend).
 */
export type GemmKind = "tfjs" | "heap" | "js"

/** The decoder's default for `config` on the current backend. */
export const defaultGemm = (config: ModelConfig): GemmKind =>
  tf.getBackend() === "cpu" ? "js" : isWasm() && !wasmPacksWeights(config) && heapGemmAvailable() ? "heap" : "tfjs"

/** A dense [in, out] matrix in the form its Gemm wants. */
export interface Matrix {
  readonly rows: number // in
  readonly cols: number // out
  readonly tensor?: tf.Tensor2D // "tfjs" and "heap": [in, out] on the device
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
   * Reads the model's current variables (default gemm: "tfjs" unless on the cpu backend). The
   * matrices share the variables' memory: an update assigns a variable new memory, never writes
   * into the old, so the snapshot stays what it was. With LoRA the server decodes with the
   * merged weights (base + scale·A·B), computed on the backend.
   */
  static fromModel(model: Transformer, options: { readonly version?: number; readonly gemm?: GemmKind } = {}): DecodeWeights {
    const version = options.version ?? model.version
    const merged = model.mergedTensors()
    try {
      return DecodeWeights.build(model.config, (name) => merged.get(name) ?? model.params.get(name), version, options.gemm, model.headWeight())
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
      return DecodeWeights.build(config, (name) => tensors.get(name), version, options.gemm)
    } finally {
      tf.dispose([...tensors.values()])
    }
  }

  /** `head`: the head as [d, vocab] when the caller has it (a model keeps its tied embedding's transpose). */
  private static build(config: ModelConfig, get: (name: string) => tf.Tensor | undefined, version: number, gemmKind: GemmKind | undefined, head?: tf.Tensor2D): DecodeWeights {
    const c = config
    const gemm = gemmKind ?? defaultGemm(config)
    const p = (name: string) => {
      const t = get(name)
      if (t === undefined) throw new Error(`no parameter ${name}`)
      return t as tf.Tensor2D
    }
    // One copy out of the wasm heap (dataSync would copy, and a Float32Array of that copy again).
    const values = (name: string) => (isWasm() ? view(p(name)).slice() : new Float32Array(p(name).dataSync() as Float32Array))
    const optional = (name: string) => (get(name) !== undefined ? values(name) : undefined)
    const matrix = (t: tf.Tensor2D): Matrix => {
      const [rows, cols] = t.shape
      if (gemm !== "js") return { rows, cols, tensor: tf.keep(tf.clone(t)) } // shares t's memory
      const tt = transpose2d(t)
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
        qkv: matrix(qkv),
        qkvBias: biases.every((b) => b !== undefined) ? Float32Array.from([...biases[0]!, ...biases[1]!, ...biases[2]!]) : undefined,
        qNorm: optional(n("attn.q_norm.weight")),
        kNorm: optional(n("attn.k_norm.weight")),
        wo: matrix(p(n("attn.wo"))),
        woBias: optional(n("attn.bo")),
        mlpNorm: values(n("mlp_norm.weight")),
        w1: matrix(p(n("mlp.w1"))),
        w3: matrix(p(n("mlp.w3"))),
        w2: matrix(p(n("mlp.w2")))
      }
      qkv.dispose()
      return layer
    })
    const headT = head ?? (c.tieEmbeddings ? transpose2d(p("tok_embeddings.weight")) : p("lm_head.weight"))
    const headMatrix = matrix(headT)
    if (head === undefined && c.tieEmbeddings) headT.dispose()
    // On wasm the table stays on the device: copying 28M floats (a 49k vocabulary) out costs
    // more than a snapshot's other work, and a lookup reads d floats of it per token.
    const embeddings = gemm !== "js" && isWasm() ? tf.keep(tf.clone(p("tok_embeddings.weight"))) : values("tok_embeddings.weight")
    return new DecodeWeights(c, version, gemm, embeddings, layers, values("norm.weight"), headMatrix)
  }

  /** The embedding table's values, [vocab, d]; a view of the device's memory, valid until the next tfjs call that allocates. */
  embeddings(): Float32Array {
    return this.embeddingTable instanceof Float32Array ? this.embeddingTable : view(this.embeddingTable)
  }

  /** Releases the device copies of the matrices. */
  dispose(): void {
    if (!(this.embeddingTable instanceof Float32Array)) this.embeddingTable.dispose()
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
