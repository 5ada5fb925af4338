/**
 * The policy model: a decoder-only, pre-norm transformer in TensorFlow.js, in the spirit of
 * nanoGPT — one block type, repeated:
 *
 *   x = embed(tokens)
 *   for every layer:   x = x + Wo·attention(rmsnorm(x)·Wq, rmsnorm(x)·Wk, rmsnorm(x)·Wv)   (causal, RoPE)
 *                      x = x + W2·(silu(W1·m) ⊙ W3·m),  m = rmsnorm(x)                     (SwiGLU)
 *   logits = rmsnorm(x)·head        (head = embeddingᵀ when tied)
 *
 * Matrices are [in, out] so a layer is `x·W` (held [out, in] by a model multiplied in place, see
 * `products`); the Llama family's options (grouped-query attention, q/k/v biases, per-head q/k
 * norms, RoPE scaling) are documented in config.ts.
 * `forward(batch)` is the training pass, differentiable: rows of packed sequences (each row may
 * hold several sequences; attention never crosses a sequence boundary, positions restart at each
 * sequence) → logits for every token. Generation runs the same arithmetic in inference form, with
 * a KV cache and without autodiff (fastDecode.ts); tests hold both to a float64 reference.
 *
 * Parameters are tf.Variables with the names of `parameterShapes` (checkpoint/hf/weights.ts maps
 * them to and from Hugging Face's). With LoRA adapters attached the base weights are frozen, and
 * the pass is built of ops that compute no gradient for them (matmul.ts). Its ops keep what
 * their gradients need and free it as the backward pass goes (heap.ts `backward`), so the wasm
 * heap bounds a micro-batch by the forward pass's activations alone. On wasm, a model whose
 * weights XNNPACK's packed copies would not fit beside (memory.ts `wasmPacksWeights`) multiplies
 * its frozen weights in place (`products`) and trains LoRA adapters only; `tokenLogprobs` then
 * runs the head and the log-probabilities chunk by chunk (headLogprobs.ts) instead of holding
 * every row's logits.
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import { type LoraConfig, loraSites, mergeAdapters } from "./lora.js"
import { checkWeights, initWeights, type Weights, WeightsError } from "./weights.js"
import { upload } from "./heap.js"
import { attention, type AttentionLayout, segmentStarts } from "./attention.js"
import { heapGemmAvailable } from "./gemmKernel.js"
import { headLogprobs, type HeadLogprobs } from "./headLogprobs.js"
import { frozenMatmul, heapProducts, loraLinear, matmul, type Products, tfjsProducts, tiedHead, transpose2d } from "./matmul.js"
import { embed, residual, rmsNorm, type RopeTable, ropeTable, swiglu, tokenLogprobs } from "./ops.js"
import { defaultProducts, fromLayout, isLinearMatrix, layoutOf, type ProductsKind, storedShape, storedShapes, toLayout } from "./matrixLayout.js"

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

/** LoRA adapters on some of the model's matrices (see lora.ts). */
interface Adapters {
  readonly config: LoraConfig
  readonly variables: ReadonlyMap<string, tf.Variable>
  /** Our matrix name → its adapters' names. */
  readonly sites: ReadonlyMap<string, { readonly a: string; readonly b: string }>
}

export class Transformer {
  private parameters: Map<string, tf.Variable>
  private kind: ProductsKind
  private adapters: Adapters | undefined
  /** The policy version of the current weights. */
  version: number
  private readonly rope: RopeTable
  /** Transposes kept while the parameter they were taken of is unchanged (by its data; see `transposed`). */
  private readonly transposes = new Map<string, { readonly of: object; readonly t: tf.Tensor2D }>()
  /** Takes the tensors (checked by the caller, in `products`' layout) as its variables' initial values; a variable shares its tensor's memory. */
  private constructor(
    readonly config: ModelConfig,
    tensors: ReadonlyMap<string, tf.Tensor>,
    products: ProductsKind
  ) {
    this.parameters = new Map([...tensors].map(([name, initial]) => [name, variableOf(initial)]))
    this.kind = products
    this.version = config.version
    this.rope = ropeTable(config.contextLength, config.headDim, config.ropeTheta, config.ropeScaling)
  }

  /**
   * A model with the given weights (checked against the config's names and shapes, [in, out]),
   * multiplying its base with `products` (default: `defaultProducts`).
   */
  static fromWeights(config: ModelConfig, weights: Weights, products: ProductsKind = defaultProducts(config)): Transformer {
    const shapes = parameterShapes(config)
    checkWeights(shapes, weights)
    const layout = layoutOf(products)
    return new Transformer(config, new Map(Object.keys(shapes).map((name) => [name, upload(toLayout(name, shapes[name]!, weights[name]!, layout), storedShape(name, shapes[name]!, layout))])), products)
  }

  /**
   * A model whose weights are these float32 tensors, already on the backend (the loader fills
   * them in place: no JS copy), in the layout of `products` (default: `defaultProducts`). It
   * takes them over, and disposes them if they do not fit the config's names and shapes.
   */
  static fromTensors(config: ModelConfig, tensors: ReadonlyMap<string, tf.Tensor>, products: ProductsKind = defaultProducts(config)): Transformer {
    const shapes = storedShapes(config, layoutOf(products))
    const wrong =
      [...tensors].find(([name, t]) => shapes[name]?.join(",") !== t.shape.join(",") || t.dtype !== "float32")?.[0] ??
      Object.keys(shapes).find((name) => !tensors.has(name))
    if (wrong !== undefined) {
      tf.dispose([...tensors.values()])
      throw new WeightsError(`parameter ${wrong}: ${tensors.has(wrong) ? `[${tensors.get(wrong)!.shape.join(", ")}] ${tensors.get(wrong)!.dtype}` : "missing"}, expected [${(shapes[wrong] ?? []).join(", ")}] float32`)
    }
    return new Transformer(config, new Map(Object.keys(shapes).map((name) => [name, tensors.get(name)!])), products)
  }

  /** A freshly initialised model; the same config and seed give the same weights everywhere. */
  static init(config: ModelConfig, seed: number): Transformer {
    return Transformer.fromWeights(config, initWeights(config, seed))
  }

  /** The variables by name, each linear matrix in the layout of `products`. */
  get params(): ReadonlyMap<string, tf.Variable> {
    return this.parameters
  }

  /** How the frozen base weights are multiplied, and so how the matrices are held (matrixLayout.ts); trained weights use tfjs's matmul. */
  get products(): ProductsKind {
    return this.kind
  }

  /** Switches how the base is multiplied (tests set "heap" on models too small to need it): every linear matrix a new variable in that layout. */
  set products(kind: ProductsKind) {
    if (kind === this.kind) return
    if (kind === "heap" && !heapGemmAvailable()) throw new WeightsError("products \"heap\" needs the wasm backend with SIMD")
    for (const [name, v] of this.parameters) {
      if (!isLinearMatrix(name, v.shape)) continue
      this.parameters.set(name, variableOf(transpose2d(v as tf.Tensor2D)))
      v.dispose()
    }
    for (const { t } of this.transposes.values()) t.dispose()
    this.transposes.clear()
    this.kind = kind
  }

  param(name: string): tf.Variable {
    const p = this.params.get(name)
    if (p === undefined) throw new WeightsError(`no parameter ${name}`)
    return p
  }

  /** What training updates, by name: every parameter, or only the LoRA adapters when attached. */
  get trainable(): ReadonlyMap<string, tf.Variable> {
    if (this.adapters === undefined && this.kind === "heap") {
      throw new WeightsError(`a model multiplied in place (products "heap": its weights would not fit the wasm heap beside XNNPACK's packed copies) trains LoRA adapters only; attach adapters first`)
    }
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

  /** A copy of the adapters' values (empty without LoRA). Synchronous: not on WebGPU (see `readWeights`). */
  readAdapters(): Weights {
    return copyValues(this.adapters?.variables ?? [])
  }

  /** `readAdapters`, read asynchronously: on every backend. */
  readAdaptersAsync(): Promise<Weights> {
    return copyValuesAsync(this.adapters?.variables ?? [])
  }

  /** Replaces the adapters' values (all or nothing). */
  setAdapters(adapters: Weights): void {
    if (this.adapters === undefined) throw new WeightsError("no LoRA adapters are attached")
    checkWeights(Object.fromEntries([...this.adapters.variables].map(([n, v]) => [n, v.shape])), adapters)
    for (const [name, v] of this.adapters.variables) assignValues(v, adapters[name]!)
  }

  /**
   * W + scale·A·B of every adapted matrix, in the layout of `products`, computed on the backend
   * (new tensors the caller disposes; empty without LoRA): what a server decodes with, without
   * copying every weight out to JavaScript and back.
   */
  mergedTensors(): Map<string, tf.Tensor2D> {
    const out = new Map<string, tf.Tensor2D>()
    if (this.adapters === undefined) return out
    const { config, variables, sites } = this.adapters
    for (const [param, site] of sites) {
      const update = () => {
        const ab = tf.matMul(tf.mul(variables.get(site.a)!, config.scale) as tf.Tensor2D, variables.get(site.b) as tf.Tensor2D)
        return this.kind === "heap" ? transpose2d(ab as tf.Tensor2D) : ab // in the base's layout
      }
      out.set(param, tf.tidy(() => tf.add(this.param(param), update())))
    }
    return out
  }

  /** The weights a server decodes with: the base, with the adapters merged in when attached. */
  async servingWeights(): Promise<Weights> {
    const base = await this.readWeightsAsync()
    return this.adapters === undefined ? base : mergeAdapters(this.config, this.adapters.config, base, await this.readAdaptersAsync())
  }

  // -------------------------------------------------------------------------------------------
  // Training forward

  /** Logits [rows·seqLen, vocab] for every token of a packed batch. */
  forward(batch: TokenBatch, options: { readonly training?: boolean } = {}): tf.Tensor2D {
    return tf.tidy(() => this.head(this.trunk(batch, options)))
  }

  /**
   * log π(targets[i]) and the entropy of π at every token of a packed batch (targets aligned with
   * its tokens): the logits' log-softmax, or with the head frozen and multiplied in place the
   * head and log-softmax fused, chunk by chunk (headLogprobs.ts). With `training` the
   * log-probabilities carry gradients to what is trained.
   */
  tokenLogprobs(batch: TokenBatch, targets: Int32Array, options: { readonly training?: boolean } = {}): HeadLogprobs {
    let entropy: tf.Tensor1D | undefined
    const logprobs = tf.tidy(() => {
      let out: HeadLogprobs
      if (this.kind === "heap") out = headLogprobs(this.trunk(batch, options), this.headRows(), targets, options.training ?? false)
      else out = tokenLogprobs(this.forward(batch, options), targets)
      entropy = tf.keep(out.entropy)
      return out.logprobs
    })
    return { logprobs, entropy: entropy! }
  }

  /** The final norm's output [rows·seqLen, d] for every token of a packed batch (call within a tidy). */
  private trunk(batch: TokenBatch, options: { readonly training?: boolean }): tf.Tensor2D {
    const { rows, seqLen } = batch
    const c = this.config
    if (seqLen > c.contextLength) throw new WeightsError(`rows of ${seqLen} tokens exceed the context of ${c.contextLength}`)
    const layout: AttentionLayout = {
      rows,
      seqLen,
      heads: c.nHeads,
      kvHeads: c.kvHeads,
      headDim: c.headDim,
      positions: batch.positions,
      segStart: segmentStarts(rows, seqLen, batch.segments),
      rope: this.rope,
      training: options.training ?? false
    }
    let x = embed(batch.inputIds, this.param("tok_embeddings.weight") as tf.Tensor2D)
    // A tidy per layer drops what its backward pass does not need (what it does is saved and
    // kept by tfjs) as soon as the layer is done, not at the end of the whole pass.
    for (let l = 0; l < c.nLayers; l++) x = tf.tidy(() => this.block(x, l, layout))
    return this.norm(x, "norm")
  }

  /**
   * With LoRA adapters attached the base weights are frozen: their products and norms then
   * compute no gradient for them (matmul.ts), so a backward pass costs one forward, not two.
   */
  private get frozen(): boolean {
    return this.adapters !== undefined
  }

  /** How the frozen weights are multiplied (see `products`): heapProducts take them [out, in]. */
  private get frozenProducts(): Products {
    return this.kind === "heap" ? heapProducts : tfjsProducts
  }

  private norm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    return rmsNorm(x, this.param(`${name}.weight`) as tf.Tensor1D, this.config.normEps, this.frozen)
  }

  /** x·W (+ the LoRA update when W is adapted) (+ b when the parameter `bias` exists). */
  private linear(x: tf.Tensor2D, weight: string, bias: string, training = false): tf.Tensor2D {
    const w = this.param(weight) as tf.Tensor2D
    const site = this.adapters?.sites.get(weight)
    let y: tf.Tensor2D
    if (site !== undefined) {
      const { config, variables } = this.adapters!
      const input = training && config.dropout > 0 ? (tf.dropout(x, config.dropout) as tf.Tensor2D) : x
      y = loraLinear(x, input, w, variables.get(site.a) as tf.Tensor2D, variables.get(site.b) as tf.Tensor2D, config.scale, this.frozenProducts)
    } else y = this.frozen || this.kind === "heap" ? frozenMatmul(x, w, undefined, this.frozenProducts) : matmul(x, w)
    const b = this.params.get(bias)
    return b === undefined ? y : tf.add(y, b)
  }

  /** RMSNorm over every head of x [N, heads·hd] (Qwen3's q_norm / k_norm). */
  private headNorm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const [n, width] = x.shape
    const hd = this.config.headDim
    const normed = rmsNorm(tf.reshape(x, [(n * width) / hd, hd]), this.param(name) as tf.Tensor1D, this.config.normEps, this.frozen)
    return tf.reshape(normed, [n, width])
  }

  /** One pre-norm block. */
  private block(x: tf.Tensor2D, l: number, layout: AttentionLayout): tf.Tensor2D {
    const p = `layers.${l}`
    const linear = (input: tf.Tensor2D, name: string, bias = "") => this.linear(input, `${p}.${name}`, `${p}.${bias}`, layout.training)
    const h = this.norm(x, `${p}.attn_norm`)
    let q = linear(h, "attn.wq", "attn.bq")
    let k = linear(h, "attn.wk", "attn.bk")
    if (this.config.qkNorm === true) {
      q = this.headNorm(q, `${p}.attn.q_norm.weight`)
      k = this.headNorm(k, `${p}.attn.k_norm.weight`)
    }
    const a = attention(q, k, linear(h, "attn.wv", "attn.bv"), layout)
    x = residual(x, linear(a, "attn.wo", "attn.bo"))
    const m = this.norm(x, `${p}.mlp_norm`)
    const hidden = swiglu(linear(m, "mlp.w1"), linear(m, "mlp.w3"))
    return residual(x, linear(hidden, "mlp.w2"))
  }

  /** Logits of the final norm's output h. */
  private head(h: tf.Tensor2D): tf.Tensor2D {
    if (this.kind === "heap") return frozenMatmul(h, this.headRows(), undefined, heapProducts)
    if (this.config.tieEmbeddings) {
      const e = this.param("tok_embeddings.weight") as tf.Tensor2D
      return this.frozen ? frozenMatmul(h, this.headWeight(), e, this.frozenProducts) : tiedHead(h, e, this.headWeight())
    }
    const w = this.param("lm_head.weight") as tf.Tensor2D
    return this.frozen ? frozenMatmul(h, w, this.transposed("lm_head.weight"), this.frozenProducts) : matmul(h, w)
  }

  /**
   * The head as a [d, vocab] matrix: `lm_head.weight`, or with tied embeddings the embedding
   * transposed — kept until the embedding changes, since transposing 28M floats (a 49k
   * vocabulary) every forward pass, and having XNNPACK repack the result, costs more than a
   * short micro-batch's head itself. The engine's weight snapshot shares it.
   */
  headWeight(): tf.Tensor2D {
    if (this.config.tieEmbeddings) return this.transposed("tok_embeddings.weight")
    return this.kind === "heap" ? this.transposed("lm_head.weight") : (this.param("lm_head.weight") as tf.Tensor2D)
  }

  /** The head as a [vocab, d] matrix in a model multiplied in place: the embedding when tied, else lm_head as held. */
  private headRows(): tf.Tensor2D {
    return this.param(this.config.tieEmbeddings ? "tok_embeddings.weight" : "lm_head.weight") as tf.Tensor2D
  }

  /** `name`ᵀ, kept until the parameter is assigned new values (a variable's data changes identity then). */
  private transposed(name: string): tf.Tensor2D {
    const p = this.param(name)
    const kept = this.transposes.get(name)
    if (kept !== undefined && kept.of === p.dataId) return kept.t
    kept?.t.dispose()
    const t = tf.keep(transpose2d(p as tf.Tensor2D))
    this.transposes.set(name, { of: p.dataId, t })
    return t
  }

  // -------------------------------------------------------------------------------------------
  // Weights

  /**
   * A copy of every parameter's values, [in, out] whatever the layout of `products`. Synchronous,
   * so not on WebGPU (tfjs reads a GPU tensor synchronously only through a browser's
   * OffscreenCanvas): what runs on every backend, the device, uses `readWeightsAsync`.
   */
  readWeights(): Weights {
    return this.inOut(copyValues(this.params))
  }

  /** `readWeights`, read asynchronously: on every backend. */
  async readWeightsAsync(): Promise<Weights> {
    return this.inOut(await copyValuesAsync(this.params))
  }

  /** The parameters' values as read, with every matrix put into [in, out]. */
  private inOut(weights: Weights): Weights {
    const layout = layoutOf(this.kind)
    for (const [name, shape] of Object.entries(parameterShapes(this.config))) weights[name] = fromLayout(name, shape, weights[name]!, layout)
    return weights
  }

  /** Replaces every parameter's values ([in, out]; checked against the config first: all or nothing). */
  setWeights(weights: Weights, version?: number): void {
    const shapes = parameterShapes(this.config)
    checkWeights(shapes, weights)
    const layout = layoutOf(this.kind)
    for (const [name, v] of this.params) assignValues(v, toLayout(name, shapes[name]!, weights[name]!, layout))
    if (version !== undefined) this.version = version
  }

  dispose(): void {
    for (const { t } of this.transposes.values()) t.dispose()
    for (const v of this.params.values()) v.dispose()
    for (const v of this.adapters?.variables.values() ?? []) v.dispose()
  }
}

/** A trainable variable holding `initial` (which it takes over). */
const variableOf = (initial: tf.Tensor): tf.Variable => {
  const variable = tf.variable(initial, true)
  initial.dispose()
  return variable
}

/** A copy of each variable's values, by name. */
const copyValues = (variables: Iterable<readonly [string, tf.Variable]>): Weights =>
  Object.fromEntries(Array.from(variables, ([name, v]) => [name, new Float32Array(v.dataSync() as Float32Array)]))

/** The same, read asynchronously, one variable at a time (a GPU stages each read in a buffer of its size). */
const copyValuesAsync = async (variables: Iterable<readonly [string, tf.Variable]>): Promise<Weights> => {
  const out: Weights = {}
  for (const [name, v] of variables) out[name] = new Float32Array((await v.data()) as Float32Array)
  return out
}

/** Gives `v` a copy of `values`. */
const assignValues = (v: tf.Variable, values: Float32Array): void => {
  const t = upload(values, v.shape)
  v.assign(t)
  t.dispose()
}
