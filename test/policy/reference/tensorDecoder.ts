/**
 * A reference device decoder: the transformer's inference pass as plain tfjs ops, with the
 * weights and every KV cache held as tensors and one asynchronous read per step — the contract
 * of the engine's device decoders (engine/decoder.ts `DeviceDecoder`), on any tfjs backend.
 *
 * It is what the WebGPU decoder's shaders are checked against on a real WebGPU device
 * (fixtures/webgpu-decode.ts), what the engine's asynchronous path is tested with on the test
 * backend (engine.test.ts), and the baseline of the decode benches (bench/decode-queue.ts,
 * bench/gpu). It is itself held to the CPU decoder (tensor-decode.test.ts). Production decodes
 * with fastDecode.ts (CPU backends) or webgpuDecode.ts (WebGPU), never with this.
 *
 *   KV caches   one pool of rows per layer for keys (rotated) and one for values, [rows, kvDim];
 *               a sequence's cache is a contiguous range of rows (KvRows)
 *   a step      the new tokens of every chunk as one batch of rows: dense products, norms, RoPE
 *               and the MLP over all rows at once; each row's key and value written to its row of
 *               the pools; attention per group of chunks of one length (every decoding chunk,
 *               length 1, is one group; a prompt is a group of its own)
 */
import { checkWeights, KvRows, type ModelConfig, parameterShapes, type Pick, readDraw, ropeTable, type StepRow, type StepRows, type TensorChunk, type Transformer, type Weights } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"

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
    // A clone shares the variable's memory: an update gives the variable new memory.
    tensors.set(name, merged.get(name) ?? tf.keep(tf.clone(model.params.get(name)!)))
  }
  return { tensors, head: tf.keep(tf.clone(model.headWeight())) }
}

const snapshotOfWeights = (config: ModelConfig, weights: Weights): Snapshot => {
  const shapes = parameterShapes(config)
  checkWeights(shapes, weights)
  const tensors = new Map(Object.keys(shapes).map((name) => [name, tf.tensor(Float32Array.from(weights[name]!), [...shapes[name]!])] as const))
  const head = config.tieEmbeddings ? tf.transpose(tensors.get("tok_embeddings.weight")! as tf.Tensor2D) : (tf.clone(tensors.get("lm_head.weight")!) as tf.Tensor2D)
  return { tensors, head }
}

const disposeSnapshot = (s: Snapshot) => tf.dispose([...s.tensors.values(), s.head])

/**
 * For each row of `logits` [P, V] and its pick: [P, 4] = (drawn id, its logprob under τ, argmax
 * id, its logprob under τ), τ taken as 1 for a greedy pick — the layout the WebGPU decoder's
 * draw shader writes and `readDraw` reads. The draw is the Sampler's: the first token at which
 * the cumulative softmax(z/τ) reaches u.
 */
export const drawOnDevice = (logits: tf.Tensor2D, picks: ReadonlyArray<Pick>): tf.Tensor2D =>
  tf.tidy(() => {
    const [P, V] = logits.shape
    const tau = tf.tensor2d(Float32Array.from(picks, (p) => (p.temperature > 0 ? p.temperature : 1)), [P, 1])
    const u = tf.tensor2d(Float32Array.from(picks, (p) => p.u), [P, 1])
    const scaled = tf.div(logits, tau)
    const max = tf.max(scaled, 1, true)
    const cumulative = tf.cumsum(tf.exp(tf.sub(scaled, max)), 1)
    const total = tf.slice(cumulative, [0, V - 1], [P, 1])
    const lse = tf.reshape(tf.add(max, tf.log(total)), [P])
    // the first index whose cumulative mass reaches u: how many stay below it
    const drawn = tf.minimum(tf.sum(tf.cast(tf.less(cumulative, tf.mul(u, total)), "int32"), 1), tf.scalar(V - 1, "int32"))
    const best = tf.cast(tf.argMax(logits, 1), "int32")
    const flat = tf.reshape(scaled, [P * V])
    const rowStart = tf.tensor1d(Int32Array.from({ length: P }, (_, r) => r * V), "int32")
    const logprobAt = (id: tf.Tensor1D) => tf.sub(tf.gather(flat, tf.add(rowStart, id)), lse)
    return tf.stack([tf.cast(drawn, "float32"), logprobAt(drawn as tf.Tensor1D), tf.cast(best, "float32"), logprobAt(best as tf.Tensor1D)], 1) as tf.Tensor2D
  })

/** The chunks of one attention group: equal length, consecutive in the step's rows. */
interface Group {
  readonly chunks: ReadonlyArray<number>
  readonly length: number
}

/** What one group's attention reads: its caches' pool rows [C·L] and the additive mask [C, 1, G·T, L]. */
interface GroupReads {
  readonly rows: tf.Tensor1D
  readonly mask: tf.Tensor4D
  readonly span: number
}

export class TensorDecoder {
  readonly config: ModelConfig
  private weights: Snapshot
  private readonly keys: Array<tf.Tensor2D>
  private readonly values: Array<tf.Tensor2D>
  readonly kv: KvRows
  /** cos and sin of every (position, frequency), [context, hd/2]. */
  private readonly cos: tf.Tensor2D
  private readonly sin: tf.Tensor2D

  /** `kvBytes`: memory for the caches, of which no more is taken than `maxSequences` whole-context caches need. */
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
   * to the token drawn on the device where `picks[i]` is given.
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
      const angles = { cos: tf.gather(this.cos, posT) as tf.Tensor2D, sin: tf.gather(this.sin, posT) as tf.Tensor2D }
      const reads = groups.map((g) => this.groupReads(g, chunks))
      const write = this.rowWriter(slots)
      let x = tf.gather(this.weight("tok_embeddings.weight"), tf.tensor1d(ids, "int32")) as tf.Tensor2D
      for (let l = 0; l < c.nLayers; l++) x = this.block(x, l, angles, write, groups, reads)
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
    tf.dispose([...this.keys, ...this.values, this.cos, this.sin])
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
    return tf.mul(tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), this.config.normEps))), w)
  }

  /** RMSNorm of every head of x [n, heads·hd] (Qwen3's q_norm / k_norm). */
  private headNorm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const [n, width] = x.shape
    const hd = this.config.headDim
    return tf.reshape(this.norm(tf.reshape(x, [(n * width) / hd, hd]), this.weight(name)), [n, width])
  }

  /** x·cos + rotateHalf(x)·sin over every head of x [n, heads·hd], rotateHalf(x) = (−x₂, x₁). */
  private rope(x: tf.Tensor2D, angles: { readonly cos: tf.Tensor2D; readonly sin: tf.Tensor2D }): tf.Tensor2D {
    const [n, width] = x.shape
    const half = angles.cos.shape[1]
    const pairs = tf.reshape(x, [n, width / (2 * half), 2, half])
    const cos = tf.reshape(angles.cos, [n, 1, 1, half])
    const sin = tf.reshape(angles.sin, [n, 1, 1, half])
    const rotated = tf.mul(tf.reverse(pairs, 2), tf.tensor4d([-1, 1], [1, 1, 2, 1]))
    return tf.reshape(tf.add(tf.mul(pairs, cos), tf.mul(rotated, sin)), [n, width])
  }

  /**
   * A pool with rows `slots[i]` replaced by `updates[i]`: one gather from the pool and the
   * updates side by side (plain ops every backend has; a new pool, the old one disposed).
   */
  private rowWriter(slots: Int32Array): (pool: tf.Tensor2D, updates: tf.Tensor2D) => tf.Tensor2D {
    const rows = Math.max(this.kv.rows, 1)
    const from = Int32Array.from({ length: rows }, (_, j) => j)
    slots.forEach((slot, i) => (from[slot] = rows + i))
    const index = tf.tensor1d(from, "int32")
    return (pool, updates) => tf.gather(tf.concat([pool, updates], 0), index) as tf.Tensor2D
  }

  /**
   * What one group's attention reads: the pool rows of each of its chunks' caches (the longest
   * capacity, L) and the mask that lets each new token (for each of the G query heads sharing a
   * kv head) see its own sequence up to itself.
   */
  private groupReads(g: Group, chunks: ReadonlyArray<TensorChunk>): GroupReads {
    const T = g.length
    const span = Math.max(...g.chunks.map((i) => chunks[i]!.cache.capacity))
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
    angles: { readonly cos: tf.Tensor2D; readonly sin: tf.Tensor2D },
    write: (pool: tf.Tensor2D, updates: tf.Tensor2D) => tf.Tensor2D,
    groups: ReadonlyArray<Group>,
    reads: ReadonlyArray<GroupReads>
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
    q = this.rope(q, angles)
    k = this.rope(k, angles)
    // The new keys and values into their rows of the pools, which outlive the step.
    const keys = this.replacePool(this.keys, l, write(this.keys[l]!, k))
    const values = this.replacePool(this.values, l, write(this.values[l]!, v))
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
    const gate = this.linear(m, `${p}.mlp.w1`)
    const hidden = tf.mul(tf.mul(gate, tf.sigmoid(gate)), this.linear(m, `${p}.mlp.w3`)) as tf.Tensor2D
    return tf.add(x, this.linear(hidden, `${p}.mlp.w2`))
  }

  private replacePool(pools: Array<tf.Tensor2D>, l: number, next: tf.Tensor2D): tf.Tensor2D {
    pools[l]!.dispose()
    pools[l] = tf.keep(next)
    return next
  }

  /** Causal attention of one group's queries q [C·T, H·hd] over its caches → [C·T, H·hd]. */
  private attention(q: tf.Tensor2D, keys: tf.Tensor2D, values: tf.Tensor2D, C: number, T: number, read: GroupReads): tf.Tensor2D {
    const c = this.config
    const KV = c.kvHeads
    const G = c.nHeads / KV
    const hd = c.headDim
    const L = read.span
    // [C, KV, L, hd]: the group's cache rows, one kv head after another
    const heads = (pool: tf.Tensor2D) => tf.transpose(tf.reshape(tf.gather(pool, read.rows), [C, L, KV, hd]), [0, 2, 1, 3])
    // query head h reads kv head h / G: [C, T, KV, G, hd] → [C, KV, G·T, hd]
    const qh = tf.reshape(tf.transpose(tf.reshape(q, [C, T, KV, G, hd]), [0, 2, 3, 1, 4]), [C, KV, G * T, hd])
    const scores = tf.add(tf.mul(tf.matMul(qh, heads(keys), false, true), 1 / Math.sqrt(hd)), read.mask)
    const out = tf.matMul(tf.softmax(scores), heads(values)) // [C, KV, G·T, hd]
    return tf.reshape(tf.transpose(tf.reshape(out, [C, KV, G, T, hd]), [0, 3, 1, 2, 4]), [C * T, c.qDim])
  }
}
