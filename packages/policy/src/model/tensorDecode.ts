/**
 * The decode path for GPU backends: the transformer's forward pass in inference form as tfjs ops,
 * with the weights and every KV cache on the device, and one asynchronous read per step (the
 * logits of each chunk's last token). WebGPU in Node has no synchronous read, and fastDecode.ts,
 * built for the CPU (JavaScript loops and wasm kernels over views of the weights), reads
 * synchronously everywhere; on a GPU those loops would leave it idle anyway.
 *
 *   KV caches   one pool of rows per layer for keys (rotated) and one for values, [rows, kvDim];
 *               a sequence's cache is a contiguous range of rows (kvRows.ts)
 *   a step      the new tokens of every chunk as one batch of rows: dense products, norms, RoPE
 *               and the MLP over all rows at once; each row's key and value written to its row of
 *               the pools (in place on WebGPU); attention per group of chunks of one length
 *               (every decoding chunk, length 1, is one group; a prompt is a group of its own),
 *               reading the group's cache rows with one gather
 *
 * The arithmetic is `Transformer.forward`'s (same norms, RoPE, grouped-query attention, SwiGLU,
 * tied or separate head); tests hold its logits to fastDecode.ts's and to the training pass.
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import { upload } from "./heap.js"
import { rmsNorm, rope, swiglu, writeRows } from "./webgpuOps.js"
import { drawOnDevice, type Pick, readDraw, type StepRow, type StepRows } from "./tensorSample.js"
import { ropeTable } from "./ops.js"
import { checkWeights, type Transformer, type Weights } from "./transformer.js"
import { BLOCK, KvRows, type TensorChunk } from "./kvRows.js"

/** The weights a step reads, by parameter name, plus the head as [d, vocab]; all kept on the device. */
interface Snapshot {
  readonly tensors: ReadonlyMap<string, tf.Tensor>
  readonly head: tf.Tensor2D
}

const snapshotOfModel = (model: Transformer): Snapshot => {
  // With LoRA the server decodes with the merged weights (base + scale·A·B).
  const merged = model.mergedTensors()
  const tensors = new Map<string, tf.Tensor>()
  for (const name of Object.keys(parameterShapes(model.config))) {
    // A clone shares the variable's memory: an update gives the variable new memory, so the
    // snapshot keeps decoding the version it announced.
    tensors.set(name, merged.get(name) ?? tf.keep(tf.clone(model.params.get(name)!)))
  }
  return { tensors, head: tf.keep(tf.clone(model.headWeight())) }
}

const snapshotOfWeights = (config: ModelConfig, weights: Weights): Snapshot => {
  const shapes = parameterShapes(config)
  checkWeights(shapes, weights)
  const tensors = new Map(Object.keys(shapes).map((name) => [name, upload(weights[name]!, shapes[name]!)] as const))
  const head = config.tieEmbeddings ? tf.transpose(tensors.get("tok_embeddings.weight")! as tf.Tensor2D) : (tf.clone(tensors.get("lm_head.weight")!) as tf.Tensor2D)
  return { tensors, head }
}

const disposeSnapshot = (s: Snapshot) => tf.dispose([...s.tensors.values(), s.head])

/** The chunks of one attention group: equal length, consecutive in the step's rows. */
interface Group {
  readonly chunks: ReadonlyArray<number>
  readonly length: number
}

export class TensorDecoder {
  readonly config: ModelConfig
  private weights: Snapshot
  private readonly keys: Array<tf.Tensor2D>
  private readonly values: Array<tf.Tensor2D>
  readonly kv: KvRows
  /** cos and sin of every (position, frequency), [context, hd/2]; ε; RoPE's [-1, 1] over halves. */
  private readonly cos: tf.Tensor2D
  private readonly sin: tf.Tensor2D
  private readonly eps: tf.Scalar
  private readonly sign: tf.Tensor4D
  /** 1/√hd, the scale of attention scores. */
  private readonly scale: tf.Scalar

  /**
   * `kvBytes`: device memory for the caches (keys and values of every layer), of which no more
   * is taken than `maxSequences` caches of the whole context need.
   */
  constructor(model: Transformer, public version: number, options: { readonly kvBytes: number; readonly maxSequences: number }) {
    const c = (this.config = model.config)
    this.weights = snapshotOfModel(model)
    this.kv = new KvRows(c.contextLength, Math.floor(options.kvBytes / (c.nLayers * 2 * c.kvDim * 4)), options.maxSequences)
    const pool = () => tf.keep(tf.zeros([Math.max(this.kv.rows, 1), c.kvDim])) as tf.Tensor2D
    this.keys = Array.from({ length: c.nLayers }, pool)
    this.values = Array.from({ length: c.nLayers }, pool)
    const table = ropeTable(c.contextLength, c.headDim, c.ropeTheta, c.ropeScaling)
    this.cos = tf.keep(tf.tensor2d(table.cos, [c.contextLength, table.half]))
    this.sin = tf.keep(tf.tensor2d(table.sin, [c.contextLength, table.half]))
    this.eps = tf.keep(tf.scalar(c.normEps))
    this.sign = tf.keep(tf.tensor4d([-1, 1], [1, 1, 2, 1]))
    this.scale = tf.keep(tf.scalar(1 / Math.sqrt(c.headDim)))
  }

  /** New weights: a model's current variables (merged with its adapters), or plain weights. */
  setWeights(source: Transformer | Weights, version: number, fromModel: boolean): void {
    const old = this.weights
    this.weights = fromModel ? snapshotOfModel(source as Transformer) : snapshotOfWeights(this.config, source as Weights)
    this.version = version
    disposeSnapshot(old)
  }

  /**
   * Appends every chunk's ids to its cache; resolves, per chunk, to the logits of its last id, or
   * to the token drawn on the device where `picks[i]` is given (tensorSample.ts). Every op is
   * queued before the one read back, so the caller may change caches or weights while it is
   * pending (their memory stays until the ops are done).
   */
  forward(chunks: ReadonlyArray<TensorChunk>, picks: ReadonlyArray<Pick | undefined> = []): Promise<StepRows> {
    const c = this.config
    for (const { cache, ids } of chunks) {
      if (cache.length + ids.length > cache.capacity) throw new RangeError(`a cache of ${cache.capacity} tokens cannot take ${ids.length} more after ${cache.length}`)
    }
    // Rows in group order: all length-1 chunks first (one group), then each longer chunk.
    const order = chunks.map((_, i) => i).sort((a, b) => chunks[a]!.ids.length - chunks[b]!.ids.length || a - b)
    const decoding = order.filter((i) => chunks[i]!.ids.length === 1)
    const groups: ReadonlyArray<Group> = [
      ...(decoding.length > 0 ? [{ chunks: decoding, length: 1 }] : []),
      ...order.filter((i) => chunks[i]!.ids.length > 1).map((i) => ({ chunks: [i], length: chunks[i]!.ids.length }))
    ]
    const n = chunks.reduce((s, ch) => s + ch.ids.length, 0)
    const ids = new Int32Array(n)
    const positions = new Int32Array(n)
    const slots = new Int32Array(n)
    const lastRows = new Int32Array(chunks.length)
    let r = 0
    order.forEach((i, k) => {
      const { cache, ids: chunkIds } = chunks[i]!
      for (let t = 0; t < chunkIds.length; t++, r++) {
        ids[r] = chunkIds[t]!
        positions[r] = cache.length + t
        slots[r] = cache.start + cache.length + t
      }
      lastRows[k] = r - 1
    })
    // Row k of the logits is chunk order[k]'s: those with a pick are drawn here, the others read whole.
    const drawn = order.flatMap((i, k) => (picks[i] !== undefined ? [k] : []))
    const whole = order.flatMap((i, k) => (picks[i] === undefined ? [k] : []))
    const [draws, rows] = tf.tidy(() => {
      const posT = tf.tensor1d(positions, "int32")
      const slotT = tf.tensor1d(slots, "int32")
      const angles = { cos: tf.gather(this.cos, posT) as tf.Tensor2D, sin: tf.gather(this.sin, posT) as tf.Tensor2D }
      const reads = groups.map((g) => this.groupReads(g, chunks))
      let x = tf.gather(this.weight("tok_embeddings.weight"), tf.tensor1d(ids, "int32")) as tf.Tensor2D
      for (let l = 0; l < c.nLayers; l++) x = this.block(x, l, angles, slotT, groups, reads)
      const h = this.norm(tf.gather(x, tf.tensor1d(lastRows, "int32")) as tf.Tensor2D, this.weight("norm.weight"))
      const logits = tf.matMul(h, this.weights.head) as tf.Tensor2D
      const select = (ks: ReadonlyArray<number>) => (ks.length === chunks.length ? logits : (tf.gather(logits, tf.tensor1d(Int32Array.from(ks), "int32")) as tf.Tensor2D))
      return [
        drawn.length === 0 ? undefined : drawOnDevice(select(drawn), drawn.map((k) => picks[order[k]!]!)),
        whole.length === 0 ? undefined : select(whole)
      ] as const
    })
    for (const { cache, ids: chunkIds } of chunks) cache.length += chunkIds.length
    const V = c.vocabSize
    return Promise.all([draws?.data(), rows?.data()])
      .then(([d, w]) => {
        const out = new Array<StepRow>(chunks.length)
        drawn.forEach((k, j) => (out[order[k]!] = readDraw(d as Float32Array, j, picks[order[k]!]!, V)))
        whole.forEach((k, j) => (out[order[k]!] = (w as Float32Array).subarray(j * V, (j + 1) * V)))
        return out
      })
      .finally(() => tf.dispose([draws, rows].filter((t): t is tf.Tensor2D => t !== undefined)))
  }

  dispose(): void {
    disposeSnapshot(this.weights)
    tf.dispose([...this.keys, ...this.values, this.cos, this.sin, this.eps, this.sign, this.scale])
  }

  private weight(name: string): tf.Tensor2D {
    return this.weights.tensors.get(name) as tf.Tensor2D
  }

  /** x·W + b (when the bias exists). */
  private linear(x: tf.Tensor2D, weight: string, bias?: string): tf.Tensor2D {
    const y = tf.matMul(x, this.weight(weight)) as tf.Tensor2D
    const b = bias === undefined ? undefined : this.weights.tensors.get(bias)
    return b === undefined ? y : (tf.add(y, b) as tf.Tensor2D)
  }

  /** RMSNorm over the last axis, scaled by w. */
  private norm(x: tf.Tensor2D, w: tf.Tensor): tf.Tensor2D {
    return rmsNorm(x, w, this.eps, this.config.normEps)
  }

  /** RMSNorm of every head of x [n, heads·hd] (Qwen3's q_norm / k_norm). */
  private headNorm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const [n, width] = x.shape
    const hd = this.config.headDim
    return tf.reshape(this.norm(tf.reshape(x, [(n * width) / hd, hd]), this.weight(name)), [n, width])
  }

  /**
   * What one group's attention reads: the pool rows of each of its chunks' caches, [C·L] (L the
   * longest cache after this step, in blocks), and the additive mask [C, 1, G·T, L] that lets
   * each new token (for each of the G query heads sharing a kv head) see its own sequence up to
   * itself.
   */
  private groupReads(g: Group, chunks: ReadonlyArray<TensorChunk>): { readonly rows: tf.Tensor1D; readonly mask: tf.Tensor4D; readonly span: number } {
    const T = g.length
    const ends = g.chunks.map((i) => chunks[i]!.cache.length + T)
    const span = Math.min(Math.max(...g.chunks.map((i) => chunks[i]!.cache.capacity)), Math.ceil(Math.max(...ends) / BLOCK) * BLOCK)
    const C = g.chunks.length
    const G = this.config.nHeads / this.config.kvHeads
    const rows = new Int32Array(C * span)
    const mask = new Float32Array(C * G * T * span).fill(-1e9)
    g.chunks.forEach((i, k) => {
      const cache = chunks[i]!.cache
      // Rows past a cache's capacity belong to another cache; they are masked, so read row 0 of its own.
      for (let j = 0; j < span; j++) rows[k * span + j] = cache.start + (j < cache.capacity ? j : 0)
      for (let h = 0; h < G; h++) {
        for (let t = 0; t < T; t++) {
          const at = ((k * G + h) * T + t) * span
          mask.fill(0, at, at + cache.length + t + 1)
        }
      }
    })
    return { rows: tf.tensor1d(rows, "int32"), mask: tf.tensor4d(mask, [C, 1, G * T, span]), span }
  }

  private block(
    x: tf.Tensor2D,
    l: number,
    positions: { readonly cos: tf.Tensor2D; readonly sin: tf.Tensor2D },
    slots: tf.Tensor1D,
    groups: ReadonlyArray<Group>,
    reads: ReadonlyArray<{ readonly rows: tf.Tensor1D; readonly mask: tf.Tensor4D; readonly span: number }>
  ): tf.Tensor2D {
    const c = this.config
    const p = `layers.${l}`
    const h = this.norm(x, this.weight(`${p}.attn_norm.weight`))
    let q = this.linear(h, `${p}.attn.wq`, `${p}.attn.bq`)
    let k = this.linear(h, `${p}.attn.wk`, `${p}.attn.bk`)
    const v = this.linear(h, `${p}.attn.wv`, `${p}.attn.bv`)
    if (c.qkNorm === true) {
      q = this.headNorm(q, `${p}.attn.q_norm.weight`)
      k = this.headNorm(k, `${p}.attn.k_norm.weight`)
    }
    q = rope(q, positions.cos, positions.sin, this.sign)
    k = rope(k, positions.cos, positions.sin, this.sign)
    // The new keys and values into their rows of the pools (webgpuOps.ts: in place on WebGPU;
    // elsewhere a new pool, kept, since the pools outlive the step).
    const keys = this.replacePool(this.keys, l, writeRows(this.keys[l]!, slots, k))
    const values = this.replacePool(this.values, l, writeRows(this.values[l]!, slots, v))
    let row = 0
    const outs = groups.map((g, i) => {
      const C = g.chunks.length
      const T = g.length
      const groupQ = groups.length === 1 ? q : tf.slice(q, [row, 0], [C * T, c.qDim])
      const a = this.attention(groupQ, keys, values, C, T, reads[i]!)
      row += C * T
      return a
    })
    const a = outs.length === 1 ? outs[0]! : (tf.concat(outs, 0) as tf.Tensor2D)
    x = tf.add(x, this.linear(a, `${p}.attn.wo`, `${p}.attn.bo`))
    const m = this.norm(x, this.weight(`${p}.mlp_norm.weight`))
    const hidden = swiglu(this.linear(m, `${p}.mlp.w1`), this.linear(m, `${p}.mlp.w3`))
    return tf.add(x, this.linear(hidden, `${p}.mlp.w2`))
  }

  private replacePool(pools: Array<tf.Tensor2D>, l: number, next: tf.Tensor2D): tf.Tensor2D {
    if (next !== pools[l]) {
      pools[l]!.dispose()
      pools[l] = tf.keep(next)
    }
    return next
  }

  /** Causal attention of one group's queries q [C·T, H·hd] over its caches → [C·T, H·hd]. */
  private attention(
    q: tf.Tensor2D,
    keys: tf.Tensor2D,
    values: tf.Tensor2D,
    C: number,
    T: number,
    read: { readonly rows: tf.Tensor1D; readonly mask: tf.Tensor4D; readonly span: number }
  ): tf.Tensor2D {
    const c = this.config
    const KV = c.kvHeads
    const G = c.nHeads / KV
    const hd = c.headDim
    const L = read.span
    // [C, KV, L, hd]: the group's cache rows, one kv head after another
    const heads = (pool: tf.Tensor2D) => tf.transpose(tf.reshape(tf.gather(pool, read.rows), [C, L, KV, hd]), [0, 2, 1, 3])
    // query head h reads kv head h / G: [C, T, KV, G, hd] → [C, KV, G·T, hd]
    const qh = tf.reshape(tf.transpose(tf.reshape(q, [C, T, KV, G, hd]), [0, 2, 3, 1, 4]), [C, KV, G * T, hd])
    const scores = tf.add(tf.mul(tf.matMul(qh, heads(keys), false, true), this.scale), read.mask)
    const out = tf.matMul(tf.softmax(scores), heads(values)) // [C, KV, G·T, hd]
    return tf.reshape(tf.transpose(tf.reshape(out, [C, KV, G, T, hd]), [0, 3, 1, 2, 4]), [C * T, c.qDim])
  }
}
