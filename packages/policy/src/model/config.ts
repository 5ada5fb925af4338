/**
 * The model's hyper-parameters. Every model is of the Llama family (decoder-only, pre-norm,
 * RMSNorm, rotary positions with half-split pairs, SwiGLU MLP W2·(silu(W1·x) ⊙ W3·x), no biases
 * unless named); a Hugging Face `config.json` of Llama, Mistral, Qwen2 or Qwen3 maps onto these
 * fields (checkpoint/hf/config.ts), and a model directory is always written in that layout.
 *
 *   tie_word_embeddings   the output head reuses the token embedding table
 *   n_kv_heads    grouped-query attention: key/value heads, each shared by n_heads / n_kv_heads
 *                 query heads (default n_heads)
 *   head_dim      may differ from d_model / n_heads, as in Qwen3 (default d_model / n_heads)
 *   qkv_bias      q, k and v projections have biases (Qwen2); o_bias: the output projection too
 *   qk_norm       an RMSNorm over each head of q and k before the rotation (Qwen3)
 *   rope_scaling  "linear" or "llama3" frequency scaling (see model/ops.ts)
 * `version` is the policy version of the weights (bumped by every training update). The schema's
 * snake_case keys are how the config travels in messages and reads in logs.
 */
import { Schema } from "effect"

const PositiveInt = Schema.Int.pipe(Schema.positive())

/** RoPE frequency scaling, as `transformers` computes it (`rope_type` "linear" or "llama3"). */
export const RopeScaling = Schema.Union(
  Schema.Struct({ type: Schema.Literal("linear"), factor: Schema.Number.pipe(Schema.positive()) }),
  Schema.Struct({
    type: Schema.Literal("llama3"),
    factor: Schema.Number.pipe(Schema.positive()),
    low_freq_factor: Schema.Number.pipe(Schema.positive()),
    high_freq_factor: Schema.Number.pipe(Schema.positive()),
    original_max_position_embeddings: PositiveInt
  })
)
export type RopeScaling = typeof RopeScaling.Type

const field = <A, I>(schema: Schema.Schema<A, I>, key: string) => Schema.propertySignature(schema).pipe(Schema.fromKey(key))
const withDefault = <A, I>(schema: Schema.Schema<A, I>, key: string, value: NoInfer<A>) =>
  Schema.optionalWith(schema, { default: () => value }).pipe(Schema.fromKey(key))

export class ModelConfig extends Schema.Class<ModelConfig>("ModelConfig")(
  {
    vocabSize: field(PositiveInt, "vocab_size"),
    dModel: field(PositiveInt, "d_model"),
    nLayers: field(PositiveInt, "n_layers"),
    nHeads: field(PositiveInt, "n_heads"),
    dFf: field(PositiveInt, "d_ff"),
    contextLength: field(PositiveInt, "context_length"),
    tieEmbeddings: withDefault(Schema.Boolean, "tie_word_embeddings", true),
    ropeTheta: withDefault(Schema.Number.pipe(Schema.positive()), "rope_theta", 10000),
    normEps: withDefault(Schema.Number.pipe(Schema.positive()), "norm_eps", 1e-5),
    nKvHeads: Schema.optional(PositiveInt).pipe(Schema.fromKey("n_kv_heads")),
    headDimension: Schema.optional(PositiveInt).pipe(Schema.fromKey("head_dim")),
    qkvBias: Schema.optional(Schema.Boolean).pipe(Schema.fromKey("qkv_bias")),
    oBias: Schema.optional(Schema.Boolean).pipe(Schema.fromKey("o_bias")),
    qkNorm: Schema.optional(Schema.Boolean).pipe(Schema.fromKey("qk_norm")),
    ropeScaling: Schema.optional(RopeScaling).pipe(Schema.fromKey("rope_scaling")),
    version: withDefault(Schema.Int.pipe(Schema.nonNegative()), "version", 0)
  },
  { identifier: "ModelConfig" }
) {
  get headDim(): number {
    return this.headDimension ?? this.dModel / this.nHeads
  }

  /** Key/value heads (grouped-query attention when fewer than `nHeads`). */
  get kvHeads(): number {
    return this.nKvHeads ?? this.nHeads
  }

  /** Width of the concatenated query heads, and of the key (or value) heads. */
  get qDim(): number {
    return this.nHeads * this.headDim
  }

  get kvDim(): number {
    return this.kvHeads * this.headDim
  }

  /** A copy with a different policy version. */
  withVersion(version: number): ModelConfig {
    return new ModelConfig({ ...this, version })
  }
}

/** Checks what the schema cannot express; throws an Error naming the problem. */
export const validate = (c: ModelConfig): ModelConfig => {
  if (c.headDimension === undefined && c.dModel % c.nHeads !== 0) throw new Error(`d_model ${c.dModel} is not divisible by n_heads ${c.nHeads}`)
  if (c.nHeads % c.kvHeads !== 0) throw new Error(`n_heads ${c.nHeads} is not a multiple of n_kv_heads ${c.kvHeads}`)
  if (c.headDim % 2 !== 0) throw new Error(`rotary positions need an even head dimension (head_dim = ${c.headDim})`)
  return c
}

/** Llama's SwiGLU width for a model width: 8/3 of it (the parameters of a 4× GELU MLP), rounded up to 32. */
export const defaultFfWidth = (dModel: number): number => Math.ceil((8 * dModel) / 3 / 32) * 32

type ConfigFields = Schema.Struct.Type<typeof ModelConfig.fields>

/** Builds a validated config from camelCase fields (defaults for the optional ones). */
export const makeConfig = (
  fields: Pick<ConfigFields, "vocabSize" | "dModel" | "nLayers" | "nHeads" | "contextLength"> & Partial<ConfigFields>
): ModelConfig => {
  if (fields.headDimension === undefined && fields.dModel % fields.nHeads !== 0) throw new Error(`d_model ${fields.dModel} is not divisible by n_heads ${fields.nHeads}`)
  // Every option explicit, so a config made here equals the one its saved config.json reads back as.
  return validate(
    new ModelConfig({
      tieEmbeddings: true,
      ropeTheta: 10000,
      normEps: 1e-5,
      version: 0,
      qkvBias: false,
      oBias: false,
      qkNorm: false,
      ...fields,
      nKvHeads: fields.nKvHeads ?? fields.nHeads,
      headDimension: fields.headDimension ?? fields.dModel / fields.nHeads,
      dFf: fields.dFf ?? defaultFfWidth(fields.dModel)
    })
  )
}

/** Shapes of every parameter, by its name in `model.safetensors`. Matrices are [in, out]. */
export const parameterShapes = (c: ModelConfig): Record<string, ReadonlyArray<number>> => {
  const d = c.dModel
  const shapes: Record<string, ReadonlyArray<number>> = { "tok_embeddings.weight": [c.vocabSize, d] }
  const norm = (name: string) => (shapes[`${name}.weight`] = [d])
  for (let l = 0; l < c.nLayers; l++) {
    const p = `layers.${l}`
    norm(`${p}.attn_norm`)
    shapes[`${p}.attn.wq`] = [d, c.qDim]
    shapes[`${p}.attn.wk`] = [d, c.kvDim]
    shapes[`${p}.attn.wv`] = [d, c.kvDim]
    shapes[`${p}.attn.wo`] = [c.qDim, d]
    if (c.qkvBias === true) {
      shapes[`${p}.attn.bq`] = [c.qDim]
      shapes[`${p}.attn.bk`] = [c.kvDim]
      shapes[`${p}.attn.bv`] = [c.kvDim]
    }
    if (c.oBias === true) shapes[`${p}.attn.bo`] = [d]
    if (c.qkNorm === true) {
      shapes[`${p}.attn.q_norm.weight`] = [c.headDim]
      shapes[`${p}.attn.k_norm.weight`] = [c.headDim]
    }
    norm(`${p}.mlp_norm`)
    shapes[`${p}.mlp.w1`] = [d, c.dFf]
    shapes[`${p}.mlp.w3`] = [d, c.dFf]
    shapes[`${p}.mlp.w2`] = [c.dFf, d]
  }
  norm("norm")
  if (!c.tieEmbeddings) shapes["lm_head.weight"] = [d, c.vocabSize]
  return shapes
}

/** Number of parameters. */
export const parameterCount = (c: ModelConfig): number =>
  Object.values(parameterShapes(c)).reduce((n, s) => n + s.reduce((a, b) => a * b, 1), 0)

/**
 * Matmul FLOPs of one forward pass over `tokens` tokens laid out in rows of `seqLen`
 * (2 per multiply-add; attention counted over the full T×T square, as computed). A training
 * step (forward + backward) costs 3× this.
 */
export const forwardFlops = (c: ModelConfig, tokens: number, seqLen: number): number => {
  const d = c.dModel
  // The one-hot embedding product is not counted: it is a lookup, not model arithmetic.
  const projections = d * (2 * c.qDim + 2 * c.kvDim)
  const perToken = c.nLayers * (projections + 3 * d * c.dFf) + d * c.vocabSize /* head */
  const attention = c.nLayers * 2 * seqLen * c.qDim // QKᵀ and P·V per token
  return 2 * tokens * (perToken + attention)
}
