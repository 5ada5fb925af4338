/**
 * A Hugging Face `config.json` (as `transformers` writes it) → the model's `ModelConfig`.
 *
 * Supported: `LlamaForCausalLM` (Llama 2/3.x, SmolLM2), `MistralForCausalLM`,
 * `Qwen2ForCausalLM` (Qwen2/2.5) and `Qwen3ForCausalLM` — one decoder: RMSNorm, RoPE (half-split,
 * `rotate_half`), SwiGLU with SiLU, grouped-query attention. What differs between them:
 *
 *   Llama     `attention_bias` on q/k/v/o; `mlp_bias` must be false
 *   Mistral   no biases; `sliding_window` must be unused
 *   Qwen2     q/k/v biases always, none on o; `use_sliding_window` must be false
 *   Qwen3     `attention_bias` on q/k/v/o, RMSNorm of each q and k head (`q_norm`, `k_norm`)
 *
 * Anything this loader would run differently from `transformers` — another architecture, MoE,
 * a sliding window in use, an unknown `rope_type`, an activation other than SiLU — is refused
 * with an error naming the key and its value. Keys that do not change the forward pass
 * (`initializer_range`, `use_cache`, dropout rates, token ids, …) are read or ignored.
 */
import { type ModelConfig, makeConfig, type RopeScaling } from "../../model/config.js"

export const HF_ARCHITECTURES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"] as const
export type HfArchitecture = (typeof HF_ARCHITECTURES)[number]

export type HfDtype = "bfloat16" | "float16" | "float32"

/** What a Hugging Face config says beyond the forward pass's shape. */
export interface HfModelConfig {
  readonly architecture: HfArchitecture
  readonly config: ModelConfig
  /** The checkpoint's dtype (`torch_dtype`, or `dtype` in newer files); float32 when absent. */
  readonly dtype: HfDtype
  readonly bosTokenId: number | undefined
  readonly eosTokenIds: ReadonlyArray<number>
  /** The file's own keys, written back unchanged (but for the weights' facts) on save. */
  readonly raw: Readonly<Record<string, unknown>>
}

/** A key whose value this loader cannot run exactly as `transformers` does. */
export class HfConfigError extends Error {
  override readonly name = "HfConfigError"
  constructor(
    readonly key: string,
    message: string
  ) {
    super(`${key}: ${message}`)
  }
}

const show = (v: unknown) => JSON.stringify(v)

/** Keys that select features this loader does not implement, whatever their value. */
const MOE_KEYS = ["num_experts", "num_local_experts", "moe_intermediate_size", "num_experts_per_tok", "n_routed_experts"]

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

export const decodeHfConfig = (json: unknown): HfModelConfig => {
  if (!isRecord(json)) throw new HfConfigError("config.json", "not a JSON object")
  const raw = json
  const get = (key: string) => raw[key]
  const int = (key: string, fallback?: number): number => {
    const v = get(key) ?? fallback
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) throw new HfConfigError(key, `must be a positive integer, got ${show(v)}`)
    return v
  }
  const num = (key: string, fallback: number): number => {
    const v = get(key) ?? fallback
    if (typeof v !== "number" || !(v > 0)) throw new HfConfigError(key, `must be a positive number, got ${show(v)}`)
    return v
  }
  const bool = (key: string, fallback: boolean): boolean => {
    const v = get(key) ?? fallback
    if (typeof v !== "boolean") throw new HfConfigError(key, `must be true or false, got ${show(v)}`)
    return v
  }

  const architectures = get("architectures")
  if (!Array.isArray(architectures) || architectures.length !== 1) {
    throw new HfConfigError("architectures", `must list exactly one of ${HF_ARCHITECTURES.join(", ")}, got ${show(architectures)}`)
  }
  const architecture = architectures[0] as HfArchitecture
  if (!HF_ARCHITECTURES.includes(architecture)) throw new HfConfigError("architectures", `${show(architecture)} is not supported (${HF_ARCHITECTURES.join(", ")} are)`)

  for (const key of MOE_KEYS) if (get(key) !== undefined && get(key) !== null && get(key) !== 0) throw new HfConfigError(key, `${show(get(key))}: mixture-of-experts models are not supported`)
  const act = get("hidden_act") ?? "silu"
  if (act !== "silu") throw new HfConfigError("hidden_act", `${show(act)} is not supported (only "silu")`)
  if (get("mlp_bias") === true) throw new HfConfigError("mlp_bias", "true is not supported")
  checkNoSlidingWindow(raw, architecture)

  const dModel = int("hidden_size")
  const nHeads = int("num_attention_heads")
  const headDim = get("head_dim") === undefined || get("head_dim") === null ? dModel / nHeads : int("head_dim")
  if (!Number.isInteger(headDim)) throw new HfConfigError("hidden_size", `${dModel} is not divisible by num_attention_heads ${nHeads} and no head_dim is given`)
  const nKvHeads = int("num_key_value_heads", nHeads)
  if (nHeads % nKvHeads !== 0) throw new HfConfigError("num_key_value_heads", `${nKvHeads} does not divide num_attention_heads ${nHeads}`)
  const { theta, scaling } = rope(raw)
  const attentionBias = architecture === "Qwen2ForCausalLM" ? true : architecture === "MistralForCausalLM" ? false : bool("attention_bias", false)
  if (architecture === "MistralForCausalLM" && get("attention_bias") === true) throw new HfConfigError("attention_bias", "MistralForCausalLM has no biases")

  let config: ModelConfig
  try {
    config = makeConfig({
      vocabSize: int("vocab_size"),
      dModel,
      nLayers: int("num_hidden_layers"),
      nHeads,
      nKvHeads,
      headDimension: headDim,
      dFf: int("intermediate_size"),
      contextLength: int("max_position_embeddings"),
      tieEmbeddings: bool("tie_word_embeddings", false),
      ropeTheta: theta,
      ...(scaling === undefined ? {} : { ropeScaling: scaling }),
      normEps: num("rms_norm_eps", 1e-6),
      qkvBias: attentionBias,
      oBias: attentionBias && architecture !== "Qwen2ForCausalLM",
      qkNorm: architecture === "Qwen3ForCausalLM",
      version: typeof get("reins_policy_version") === "number" ? (get("reins_policy_version") as number) : 0
    })
  } catch (e) {
    throw new HfConfigError("config.json", e instanceof Error ? e.message : String(e))
  }
  return { architecture, config, dtype: dtypeOf(raw), bosTokenId: tokenId(raw, "bos_token_id")[0], eosTokenIds: tokenId(raw, "eos_token_id"), raw }
}

/** Mistral's `sliding_window`, Qwen's `use_sliding_window` / `layer_types`: refused when in use. */
const checkNoSlidingWindow = (raw: Record<string, unknown>, architecture: HfArchitecture): void => {
  const window = raw["sliding_window"]
  const inUse = architecture.startsWith("Qwen") ? raw["use_sliding_window"] === true : window !== undefined && window !== null
  if (inUse) {
    const key = architecture.startsWith("Qwen") ? "use_sliding_window" : "sliding_window"
    throw new HfConfigError(key, `${show(raw[key])}: sliding-window attention is not supported`)
  }
  const types = raw["layer_types"]
  if (Array.isArray(types) && types.some((t) => t !== "full_attention")) throw new HfConfigError("layer_types", `${show(types.find((t) => t !== "full_attention"))} layers are not supported`)
}

/** `rope_theta` + `rope_scaling` (transformers ≤ 4.x) or `rope_parameters` (newer files). */
const rope = (raw: Record<string, unknown>): { theta: number; scaling: RopeScaling | undefined } => {
  const params = raw["rope_parameters"]
  const key = isRecord(params) ? "rope_parameters" : "rope_scaling"
  const p = isRecord(params) ? params : raw["rope_scaling"]
  const thetaValue = (isRecord(params) ? params["rope_theta"] : undefined) ?? raw["rope_theta"] ?? 10000
  if (typeof thetaValue !== "number" || !(thetaValue > 0)) throw new HfConfigError("rope_theta", `must be a positive number, got ${show(thetaValue)}`)
  if (p === undefined || p === null) return { theta: thetaValue, scaling: undefined }
  if (!isRecord(p)) throw new HfConfigError(key, `must be an object, got ${show(p)}`)
  const type = p["rope_type"] ?? p["type"] ?? "default"
  const factor = (name: string): number => {
    const v = p[name]
    if (typeof v !== "number" || !(v > 0)) throw new HfConfigError(`${key}.${name}`, `must be a positive number, got ${show(v)}`)
    return v
  }
  switch (type) {
    case "default":
      return { theta: thetaValue, scaling: undefined }
    case "linear":
      return { theta: thetaValue, scaling: { type: "linear", factor: factor("factor") } }
    case "llama3":
      return {
        theta: thetaValue,
        scaling: {
          type: "llama3",
          factor: factor("factor"),
          low_freq_factor: factor("low_freq_factor"),
          high_freq_factor: factor("high_freq_factor"),
          original_max_position_embeddings: factor("original_max_position_embeddings")
        }
      }
    default:
      throw new HfConfigError(`${key}.rope_type`, `${show(type)} is not supported ("default", "linear", "llama3" are)`)
  }
}

const dtypeOf = (raw: Record<string, unknown>): HfDtype => {
  const key = raw["torch_dtype"] !== undefined ? "torch_dtype" : "dtype"
  const v = raw[key] ?? "float32"
  if (v === "bfloat16" || v === "float16" || v === "float32") return v
  throw new HfConfigError(key, `${show(v)} is not supported ("bfloat16", "float16", "float32" are)`)
}

const tokenId = (raw: Record<string, unknown>, key: string): ReadonlyArray<number> => {
  const v = raw[key]
  if (v === undefined || v === null) return []
  const ids = Array.isArray(v) ? v : [v]
  if (!ids.every((id) => Number.isSafeInteger(id) && (id as number) >= 0)) throw new HfConfigError(key, `must be a token id or a list of them, got ${show(v)}`)
  return ids as ReadonlyArray<number>
}

/** The config.json to save with trained weights: the loaded file's keys, the facts updated. */
export const encodeHfConfig = (hf: HfModelConfig, options: { readonly version: number; readonly dtype: HfDtype }): Record<string, unknown> => {
  const { torch_dtype: _t, dtype: _d, ...rest } = hf.raw
  return { ...rest, architectures: [hf.architecture], torch_dtype: options.dtype, reins_policy_version: options.version }
}
