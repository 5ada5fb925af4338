/**
 * The Hugging Face side of a model directory: recognising one (config.json with
 * `architectures`), writing its config and weights back in the checkpoint's dtype,
 * and describing a model of our own as the Hugging Face architecture it is.
 */
import { type ModelConfig } from "../../model/config.js"
import type { Weights } from "../../model/weights.js"
import { decodeHfConfig, encodeHfConfig, type HfArchitecture, type HfDtype, type HfModelConfig } from "./config.js"
import { encodeHfWeights, HF_INDEX_FILE } from "./weights.js"

/** True for a `config.json` in the layout `transformers` writes (it names its `architectures`). */
export const isHfConfig = (json: unknown): boolean =>
  typeof json === "object" && json !== null && Array.isArray((json as Record<string, unknown>)["architectures"])

/** The files of the weights and config.json to write for `hf` with these weights. */
export const hfModelFiles = (
  hf: HfModelConfig,
  config: ModelConfig,
  weights: Weights,
  dtype: HfDtype = hf.dtype
): { readonly config: Record<string, unknown>; readonly weights: Uint8Array } => ({
  config: encodeHfConfig(hf, { version: config.version, dtype }),
  weights: encodeHfWeights(config, weights, dtype, { version: String(config.version) })
})

/** Files a save must remove so a single-file save does not sit beside stale shards. */
export const STALE_SHARD_INDEX = HF_INDEX_FILE

/**
 * Our model as the Hugging Face architecture it is: Qwen3 with q/k norms, Qwen2 with q/k/v biases
 * only, Llama otherwise. Throws for a bias combination none of them has (an output bias without
 * q/k/v biases, or one with q/k norms but not on every projection).
 */
export const asHfModel = (config: ModelConfig, eosTokenIds: ReadonlyArray<number>, bosTokenId?: number): HfModelConfig => {
  const qkvBias = config.qkvBias === true
  const oBias = config.oBias === true
  const architecture: HfArchitecture = config.qkNorm === true ? "Qwen3ForCausalLM" : qkvBias && !oBias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"
  // Llama and Qwen3 bias all four projections or none.
  if (architecture !== "Qwen2ForCausalLM" && qkvBias !== oBias) throw new Error(`no Hugging Face architecture has qkv_bias ${qkvBias} with o_bias ${oBias}${config.qkNorm === true ? " and q/k norms" : ""}`)
  const raw: Record<string, unknown> = {
    architectures: [architecture],
    model_type: architecture === "LlamaForCausalLM" ? "llama" : architecture === "Qwen2ForCausalLM" ? "qwen2" : "qwen3",
    vocab_size: config.vocabSize,
    hidden_size: config.dModel,
    intermediate_size: config.dFf,
    num_hidden_layers: config.nLayers,
    num_attention_heads: config.nHeads,
    num_key_value_heads: config.kvHeads,
    head_dim: config.headDim,
    hidden_act: "silu",
    max_position_embeddings: config.contextLength,
    rms_norm_eps: config.normEps,
    rope_theta: config.ropeTheta,
    ...(config.ropeScaling === undefined ? {} : { rope_scaling: { ...config.ropeScaling, rope_type: config.ropeScaling.type, type: undefined } }),
    tie_word_embeddings: config.tieEmbeddings,
    ...(architecture === "Qwen2ForCausalLM" ? { use_sliding_window: false } : { attention_bias: qkvBias }),
    ...(bosTokenId === undefined ? {} : { bos_token_id: bosTokenId }),
    eos_token_id: eosTokenIds.length === 1 ? eosTokenIds[0] : [...eosTokenIds],
    torch_dtype: "float32"
  }
  const clean = JSON.parse(JSON.stringify(raw)) as Record<string, unknown>
  return decodeHfConfig(clean)
}
