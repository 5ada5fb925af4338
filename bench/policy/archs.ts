/**
 * The real models the policy bench builds at their true shapes and vocabularies, with random
 * weights (nothing is downloaded): each one's Hugging Face `config.json` as published, read by
 * the production `decodeHfConfig`. Only `max_position_embeddings` is cut to the bench's context
 * (the KV caches are sized by it), and the files are written in F32 (the published checkpoints
 * are BF16), so the safetensors and GGUF files hold exactly the same values.
 */

export interface Arch {
  readonly id: string
  readonly title: string
  /** `config.json` as published (before the bench's context and dtype are put in). */
  readonly hfConfig: Readonly<Record<string, unknown>>
  /** llama.cpp's pre-tokenizer name for this model family (tokenizer.ggml.pre). */
  readonly ggufPreTokenizer: string
}

export const ARCHS: ReadonlyArray<Arch> = [
  {
    id: "smollm2-135m",
    title: "SmolLM2-135M",
    ggufPreTokenizer: "smollm",
    hfConfig: {
      architectures: ["LlamaForCausalLM"],
      model_type: "llama",
      attention_bias: false,
      attention_dropout: 0,
      bos_token_id: 0,
      eos_token_id: 0,
      hidden_act: "silu",
      hidden_size: 576,
      initializer_range: 0.041666666666666664,
      intermediate_size: 1536,
      max_position_embeddings: 8192,
      mlp_bias: false,
      num_attention_heads: 9,
      num_hidden_layers: 30,
      num_key_value_heads: 3,
      pretraining_tp: 1,
      rms_norm_eps: 1e-5,
      rope_scaling: null,
      rope_theta: 100000,
      tie_word_embeddings: true,
      torch_dtype: "bfloat16",
      use_cache: true,
      vocab_size: 49152
    }
  },
  {
    id: "qwen3-0.6b",
    title: "Qwen3-0.6B",
    ggufPreTokenizer: "qwen2",
    hfConfig: {
      architectures: ["Qwen3ForCausalLM"],
      model_type: "qwen3",
      attention_bias: false,
      attention_dropout: 0,
      bos_token_id: 151643,
      eos_token_id: 151645,
      head_dim: 128,
      hidden_act: "silu",
      hidden_size: 1024,
      initializer_range: 0.02,
      intermediate_size: 3072,
      max_position_embeddings: 40960,
      max_window_layers: 28,
      num_attention_heads: 16,
      num_hidden_layers: 28,
      num_key_value_heads: 8,
      rms_norm_eps: 1e-6,
      rope_scaling: null,
      rope_theta: 1000000,
      sliding_window: null,
      tie_word_embeddings: true,
      torch_dtype: "bfloat16",
      use_cache: true,
      use_sliding_window: false,
      vocab_size: 151936
    }
  }
]

/** The config.json the bench writes: the bench's context, F32, optionally fewer layers (for development). */
export const benchHfConfig = (arch: Arch, options: { readonly context: number; readonly layers?: number }): Record<string, unknown> => ({
  ...arch.hfConfig,
  max_position_embeddings: options.context,
  torch_dtype: "float32",
  ...(options.layers === undefined ? {} : { num_hidden_layers: options.layers })
})

export const archById = (id: string): Arch => {
  const arch = ARCHS.find((a) => a.id === id)
  if (arch === undefined) throw new Error(`--arch ${id}: unknown (${ARCHS.map((a) => a.id).join(", ")})`)
  return arch
}
