/**
 * The policy model: a decoder-only, pre-norm transformer in TensorFlow.js, in the spirit of
 * nanoGPT — one block type, repeated:
 *
 *   x = embed(tokens) [+ embed(positions) with learned positions]
 *   for every layer:   x = x + Wo·attention(norm(x)·Wq, norm(x)·Wk, norm(x)·Wv)      (causal, RoPE)
 *                      x = x + mlp(norm(x))                                          (GELU or SwiGLU)
 *   logits = norm(x)·head        (head = embeddingᵀ when tied)
 *
 * Matrices are stored [in, out] so a layer is `x·W`; the Llama family's options (grouped-query
 * attention, q/k/v biases, per-head q/k norms, RoPE scaling) are documented in config.ts. Two forward passes:
 *
 *   forward(batch)        training: rows of packed sequences (each row may hold several
 *                         sequences; attention never crosses a sequence boundary, positions
 *                         restart at each sequence) → logits for every token.
 *   decode(cache, ids)    generation: appends ids to a KV cache and returns their logits. This is
 *                         the tfjs reference; the engine decodes with fastDecode.ts, which is
 *                         tested to agree with it.
 *
 * Parameters are tf.Variables named as in `model.safetensors` (see `parameterShapes`).
 */
import * as tf from "@tensorflow/tfjs"
import { Rng } from "../random.js"
import { type ModelConfig, parameterShapes } from "./config.js"
import { type LoraConfig, loraSites, mergeAdapters } from "./lora.js"
import { upload } from "./heap.js"
import { attention, type AttentionLayout, embed, matmul, norm, type RopeTable, ropeTable, ropeTf } from "./ops.js"

/**
 * A training micro-batch: `rows` rows of `seqLen` tokens, row-major. `segments` numbers the
 * sequences within a row (tokens of one sequence are contiguous); `positions` restart at 0 with
 * every sequence. Padding is a sequence of its own (its loss weight is 0).
 */
export interface TokenBatch {
  readonly rows: number
  readonly seqLen: number
  readonly inputIds: Int32Array
  readonly positions: Int32Array
  readonly segments: Int32Array
}

/** The tfjs reference KV cache of one sequence: rotated keys and values [length, d] per layer. */
export interface TfKvCache {
  length: number
  keys: Array<tf.Tensor2D>
  values: Array<tf.Tensor2D>
}

export type Weights = Record<string, Float32Array>

export class WeightsError extends Error {
  override readonly name = "WeightsError"
}

const gelu = (x: tf.Tensor2D): tf.Tensor2D => tf.mul(x, tf.sigmoid(tf.mul(x, 1.702)))
const silu = (x: tf.Tensor2D): tf.Tensor2D => tf.mul(x, tf.sigmoid(x))

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

/** LoRA adapters on some of the model's matrices (see lora.ts). */
interface Adapters {
  readonly config: LoraConfig
  readonly variables: ReadonlyMap<string, tf.Variable>
  /** Our matrix name → its adapters' names. */
  readonly sites: ReadonlyMap<string, { readonly a: string; readonly b: string }>
}

export class Transformer {
  readonly params: ReadonlyMap<string, tf.Variable>
  private adapters: Adapters | undefined
  /** The policy version of the current weights. */
  version: number
  private readonly rope: RopeTable | undefined

  private constructor(
    readonly config: ModelConfig,
    weights: Weights
  ) {
    const shapes = parameterShapes(config)
    checkWeights(shapes, weights)
    this.params = new Map(
      Object.keys(shapes).map((name) => {
        const initial = upload(weights[name]!, shapes[name]!)
        const variable = tf.variable(initial, true)
        initial.dispose()
        return [name, variable]
      })
    )
    this.version = config.version
    this.rope = config.positions === "rope" ? ropeTable(config.contextLength, config.headDim, config.ropeTheta, config.ropeScaling) : undefined
  }

  /** A model with the given weights (checked against the config's names and shapes). */
  static fromWeights(config: ModelConfig, weights: Weights): Transformer {
    return new Transformer(config, weights)
  }

  /** A freshly initialised model; the same config and seed give the same weights everywhere. */
  static init(config: ModelConfig, seed: number): Transformer {
    return new Transformer(config, initWeights(config, seed))
  }

  param(name: string): tf.Variable {
    const p = this.params.get(name)
    if (p === undefined) throw new WeightsError(`no parameter ${name}`)
    return p
  }

  /** What training updates, by name: every parameter, or only the LoRA adapters when attached. */
  get trainable(): ReadonlyMap<string, tf.Variable> {
    return this.adapters?.variables ?? this.params
  }

  /** Trainable variables, in a fixed order. */
  variables(): Array<tf.Variable> {
    return [...this.trainable.values()]
  }

  /** The attached LoRA configuration, if any. */
  get lora(): LoraConfig | undefined {
    return this.adapters?.config
  }

  /**
   * Attaches LoRA adapters (A and B of every target, see lora.ts): from then on only they are
   * trained, and the base weights stay as they are.
   */
  attachLora(config: LoraConfig, adapters: Weights): void {
    if (this.adapters !== undefined) throw new WeightsError("LoRA adapters are already attached")
    const sites = loraSites(this.config, config)
    const shapes: Record<string, ReadonlyArray<number>> = {}
    for (const s of sites) {
      shapes[s.a] = [s.rows, config.rank]
      shapes[s.b] = [config.rank, s.cols]
    }
    checkWeights(shapes, adapters)
    const variables = new Map(
      Object.entries(shapes).map(([name, shape]) => {
        const t = upload(adapters[name]!, shape)
        const v = tf.variable(t, true)
        t.dispose()
        return [name, v] as const
      })
    )
    this.adapters = { config, variables, sites: new Map(sites.map((s) => [s.param, { a: s.a, b: s.b }])) }
  }

  /** A copy of the adapters' values (empty without LoRA). */
  readAdapters(): Weights {
    const out: Weights = {}
    for (const [name, v] of this.adapters?.variables ?? []) out[name] = new Float32Array(v.dataSync() as Float32Array)
    return out
  }

  /** Replaces the adapters' values (all or nothing). */
  setAdapters(adapters: Weights): void {
    if (this.adapters === undefined) throw new WeightsError("no LoRA adapters are attached")
    checkWeights(Object.fromEntries([...this.adapters.variables].map(([n, v]) => [n, v.shape])), adapters)
    for (const [name, v] of this.adapters.variables) {
      const t = upload(adapters[name]!, v.shape)
      v.assign(t)
      t.dispose()
    }
  }

  /** The weights a server decodes with: the base, with the adapters merged in when attached. */
  servingWeights(): Weights {
    const base = this.readWeights()
    return this.adapters === undefined ? base : mergeAdapters(this.config, this.adapters.config, base, this.readAdapters())
  }

  // -------------------------------------------------------------------------------------------
  // Training forward

  /** Logits [rows·seqLen, vocab] for every token of a packed batch. */
  forward(batch: TokenBatch, options: { readonly training?: boolean } = {}): tf.Tensor2D {
    const { rows, seqLen } = batch
    const c = this.config
    if (seqLen > c.contextLength) throw new WeightsError(`rows of ${seqLen} tokens exceed the context of ${c.contextLength}`)
    const layout: AttentionLayout = {
      rows,
      seqLen,
      heads: c.nHeads,
      headDim: c.headDim,
      positions: batch.positions,
      segStart: segmentStarts(rows, seqLen, batch.segments),
      rope: this.rope,
      training: options.training ?? false
    }
    return tf.tidy(() => {
      let x = this.embedTokens(batch.inputIds, batch.positions)
      for (let l = 0; l < c.nLayers; l++) x = this.block(x, l, (q, k, v) => attention(q, k, v, layout), layout.training)
      return this.head(x)
    })
  }

  private embedTokens(ids: Int32Array, positions: Int32Array): tf.Tensor2D {
    const x = embed(ids, this.param("tok_embeddings.weight") as tf.Tensor2D)
    return this.config.positions === "learned" ? tf.add(x, embed(positions, this.param("pos_embeddings.weight") as tf.Tensor2D)) : x
  }

  private norm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const bias = this.config.norm === "layernorm" ? (this.param(`${name}.bias`) as tf.Tensor1D) : undefined
    return norm(x, this.param(`${name}.weight`) as tf.Tensor1D, bias, this.config.normEps)
  }

  /** x·W (+ b when the parameter `bias` exists) (+ the LoRA update when W is adapted). */
  private linear(x: tf.Tensor2D, weight: string, bias: string, training = false): tf.Tensor2D {
    let y = matmul(x, this.param(weight) as tf.Tensor2D)
    const b = this.params.get(bias)
    if (b !== undefined) y = tf.add(y, b)
    const site = this.adapters?.sites.get(weight)
    if (site === undefined) return y
    const lora = this.adapters!
    const input = training && lora.config.dropout > 0 ? tf.dropout(x, lora.config.dropout) : x
    const update = matmul(matmul(input as tf.Tensor2D, lora.variables.get(site.a) as tf.Tensor2D), lora.variables.get(site.b) as tf.Tensor2D)
    return tf.add(y, tf.mul(update, lora.config.scale))
  }

  /** RMSNorm over every head of x [N, heads·hd] (Qwen3's q_norm / k_norm). */
  private headNorm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const [n, width] = x.shape
    const hd = this.config.headDim
    const normed = norm(tf.reshape(x, [(n * width) / hd, hd]), this.param(name) as tf.Tensor1D, undefined, this.config.normEps)
    return tf.reshape(normed, [n, width])
  }

  /** Grouped-query attention: each key/value head repeated for the query heads that share it. */
  private repeatKv(x: tf.Tensor2D): tf.Tensor2D {
    const c = this.config
    const groups = c.nHeads / c.kvHeads
    if (groups === 1) return x
    const n = x.shape[0]
    return tf.reshape(tf.tile(tf.reshape(x, [n, c.kvHeads, 1, c.headDim]), [1, 1, groups, 1]), [n, c.qDim])
  }

  /** One pre-norm block; `attend` maps (q, k, v) of the new tokens to their attention output. */
  private block(x: tf.Tensor2D, l: number, attend: (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D, training = false): tf.Tensor2D {
    const p = `layers.${l}`
    const linear = (input: tf.Tensor2D, name: string, bias = "") => this.linear(input, `${p}.${name}`, `${p}.${bias}`, training)
    const h = this.norm(x, `${p}.attn_norm`)
    let q = linear(h, "attn.wq", "attn.bq")
    let k = linear(h, "attn.wk", "attn.bk")
    if (this.config.qkNorm === true) {
      q = this.headNorm(q, `${p}.attn.q_norm.weight`)
      k = this.headNorm(k, `${p}.attn.k_norm.weight`)
    }
    const a = attend(q, this.repeatKv(k), this.repeatKv(linear(h, "attn.wv", "attn.bv")))
    x = tf.add(x, linear(a, "attn.wo", "attn.bo"))
    const m = this.norm(x, `${p}.mlp_norm`)
    const hidden: tf.Tensor2D = this.config.mlp === "swiglu" ? tf.mul(silu(linear(m, "mlp.w1")), linear(m, "mlp.w3")) : gelu(linear(m, "mlp.w1"))
    return tf.add(x, linear(hidden, "mlp.w2"))
  }


  private head(x: tf.Tensor2D): tf.Tensor2D {
    const h = this.norm(x, "norm")
    const head = this.config.tieEmbeddings ? tf.transpose(this.param("tok_embeddings.weight") as tf.Tensor2D) : (this.param("lm_head.weight") as tf.Tensor2D)
    return matmul(h, head)
  }

  // -------------------------------------------------------------------------------------------
  // Reference decoding with a KV cache

  newCache(): TfKvCache {
    return { length: 0, keys: [], values: [] }
  }

  /**
   * Runs `ids` (the next tokens of one sequence) through the model, appending their keys and
   * values to `cache`; returns their logits [ids.length, vocab].
   */
  decode(cache: TfKvCache, ids: Int32Array): tf.Tensor2D {
    const c = this.config
    const n = ids.length
    const start = cache.length
    if (start + n > c.contextLength) throw new WeightsError(`sequence of ${start + n} tokens exceeds the context of ${c.contextLength}`)
    const positions = Int32Array.from({ length: n }, (_, i) => start + i)
    const H = c.nHeads
    const hd = c.headDim
    const logits = tf.tidy(() => {
      let x = this.embedTokens(ids, positions)
      for (let l = 0; l < c.nLayers; l++) {
        x = this.block(x, l, (q, k, v) => {
          if (this.rope !== undefined) {
            q = ropeTf(q, positions, H, this.rope)
            k = ropeTf(k, positions, H, this.rope)
          }
          const keys = l < cache.keys.length ? tf.concat([cache.keys[l]!, k]) : k
          const values = l < cache.values.length ? tf.concat([cache.values[l]!, v]) : v
          tf.dispose([cache.keys[l], cache.values[l]].filter((t) => t !== undefined))
          cache.keys[l] = tf.keep(keys)
          cache.values[l] = tf.keep(values)
          const total = start + n
          const heads = (t: tf.Tensor2D, len: number) => tf.transpose(tf.reshape(t, [len, H, hd]), [1, 0, 2]) // [H, len, hd]
          const mask = new Float32Array(n * total)
          for (let i = 0; i < n; i++) mask.fill(-1e9, i * total + start + i + 1, (i + 1) * total)
          const scores = tf.add(tf.mul(tf.matMul(heads(q, n), heads(keys, total), false, true), 1 / Math.sqrt(hd)), tf.tensor3d(mask, [1, n, total]))
          const out = tf.matMul(tf.softmax(scores), heads(values, total)) // [H, n, hd]
          return tf.reshape(tf.transpose(out, [1, 0, 2]), [n, H * hd])
        })
      }
      return this.head(x)
    })
    cache.length = start + n
    return logits
  }

  disposeCache(cache: TfKvCache): void {
    tf.dispose([...cache.keys, ...cache.values])
    cache.keys = []
    cache.values = []
    cache.length = 0
  }

  // -------------------------------------------------------------------------------------------
  // Weights

  /** A copy of every parameter's values. */
  readWeights(): Weights {
    const out: Weights = {}
    for (const [name, v] of this.params) out[name] = new Float32Array(v.dataSync() as Float32Array)
    return out
  }

  /** Replaces every parameter's values (checked against the config first: all or nothing). */
  setWeights(weights: Weights, version?: number): void {
    checkWeights(parameterShapes(this.config), weights)
    for (const [name, v] of this.params) {
      const t = upload(weights[name]!, v.shape)
      v.assign(t)
      t.dispose()
    }
    if (version !== undefined) this.version = version
  }

  dispose(): void {
    for (const v of this.params.values()) v.dispose()
    for (const v of this.adapters?.variables.values() ?? []) v.dispose()
  }
}

/** Throws a WeightsError unless `weights` has exactly the expected names and sizes. */
export const checkWeights = (shapes: Record<string, ReadonlyArray<number>>, weights: Weights): void => {
  for (const [name, shape] of Object.entries(shapes)) {
    const w = weights[name]
    const size = shape.reduce((a, b) => a * b, 1)
    if (w === undefined) throw new WeightsError(`missing parameter ${name} [${shape.join(", ")}]`)
    if (w.length !== size) throw new WeightsError(`parameter ${name} has ${w.length} values, expected [${shape.join(", ")}] = ${size}`)
  }
  for (const name of Object.keys(weights)) if (!(name in shapes)) throw new WeightsError(`unexpected parameter ${name}`)
}

/**
 * GPT-2 style initialisation: N(0, 0.02) for embeddings and matrices, the residual projections
 * (attn.wo, mlp.w2) scaled by 1/√(2·layers), norm scales 1 and shifts 0.
 */
export const initWeights = (config: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const residualStd = 0.02 / Math.sqrt(2 * config.nLayers)
  const out: Weights = {}
  for (const [name, shape] of Object.entries(parameterShapes(config))) {
    const w = new Float32Array(shape.reduce((a, b) => a * b, 1))
    if (name.endsWith("norm.weight")) w.fill(1)
    else if (!name.endsWith(".bias") && !/\.attn\.b[qkvo]$/.test(name)) {
      const std = name.endsWith("attn.wo") || name.endsWith("mlp.w2") ? residualStd : 0.02
      for (let i = 0; i < w.length; i++) w[i] = std * rng.normal()
    }
    out[name] = w
  }
  return out
}
