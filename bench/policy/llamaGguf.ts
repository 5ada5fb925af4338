/**
 * A model of the Llama family (our weights and config) as a llama.cpp GGUF file, F32, so
 * llama.cpp runs the very weights the bench runs:
 *
 *   architecture  LlamaForCausalLM → "llama", Qwen3ForCausalLM → "qwen3" (others are refused)
 *   tensors       Hugging Face names (the production `hfName`) → llama.cpp's: token_embd,
 *                 blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm,
 *                 ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when tied:
 *                 llama.cpp then reuses token_embd). Dims are the Hugging Face [out, in] shape
 *                 reversed (ggml lists the contiguous dimension first).
 *   rotary        llama.cpp's "llama" rotates adjacent pairs (x0,x1), (x2,x3)…, Hugging Face's
 *                 Llama rotates half-split pairs (x_i, x_{i+D/2}); so, as llama.cpp's own
 *                 converter does, the rows of each q/k head are reordered: row 2i+s of a head
 *                 takes Hugging Face's row s·D/2+i. Qwen3 rotates half-split pairs in llama.cpp
 *                 too: no reordering.
 *   vocabulary    a stand-in of the model's size (tokenizer.ggml.model "gpt2", no merges): the
 *                 256 byte-level symbols (so any text still tokenizes), bos/eos as control
 *                 tokens, and `<tN>` for every other id. Ids, not text, are what the bench feeds.
 */
import { hfName, type ModelConfig, parameterShapes, type Weights } from "@reins/policy"
import { gguf, type GgufTensor, type GgufValue } from "./gguf.js"

export interface GgufModel {
  readonly metadata: ReadonlyArray<readonly [string, GgufValue]>
  readonly tensors: ReadonlyArray<GgufTensor>
}

const ARCH: Record<string, string> = { LlamaForCausalLM: "llama", Qwen3ForCausalLM: "qwen3" }

const LAYER_TENSORS: Record<string, string> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
  "post_attention_layernorm.weight": "ffn_norm.weight",
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight"
}

/** llama.cpp's name of a Hugging Face tensor. */
export const ggufTensorName = (hf: string): string => {
  if (hf === "model.embed_tokens.weight") return "token_embd.weight"
  if (hf === "model.norm.weight") return "output_norm.weight"
  if (hf === "lm_head.weight") return "output.weight"
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf)
  const mapped = m === null ? undefined : LAYER_TENSORS[m[2]!]
  if (mapped === undefined) throw new Error(`no llama.cpp name for tensor ${hf}`)
  return `blk.${m![1]}.${mapped}`
}

/** [rows, cols] row-major → [cols, rows]. */
const transpose = (x: Float32Array, rows: number, cols: number): Float32Array => {
  const out = new Float32Array(x.length)
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = x[i * cols + j]!
  return out
}

/** Half-split rotary rows → adjacent-pair rows, per head, of a [heads·D, cols] matrix. */
export const interleaveRotaryRows = (w: Float32Array, heads: number, cols: number): Float32Array => {
  const D = w.length / cols / heads
  const half = D / 2
  const out = new Float32Array(w.length)
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < half; i++) {
      for (let s = 0; s < 2; s++) {
        const from = (h * D + s * half + i) * cols
        out.set(w.subarray(from, from + cols), (h * D + 2 * i + s) * cols)
      }
    }
  }
  return out
}

/** GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the rest for U+0100 onwards. */
const byteSymbols = (): Array<string> => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
  let next = 0x100
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : next++))
}

/** A stand-in vocabulary of `size` ids (see the header). */
export const fakeVocab = (size: number, special: ReadonlyArray<number>): { readonly tokens: Array<string>; readonly types: Array<number> } => {
  const NORMAL = 1
  const CONTROL = 3
  const bytes = byteSymbols()
  const tokens: Array<string> = []
  const types: Array<number> = []
  let b = 0
  for (let id = 0; id < size; id++) {
    if (special.includes(id)) {
      tokens.push(`<|special_${id}|>`)
      types.push(CONTROL)
    } else {
      tokens.push(b < bytes.length ? bytes[b++]! : `<t${id}>`)
      types.push(NORMAL)
    }
  }
  return { tokens, types }
}

export interface GgufOptions {
  readonly architecture: string
  readonly name: string
  readonly bosTokenId: number
  readonly eosTokenId: number
  /** llama.cpp's pre-tokenizer name (tokenizer.ggml.pre), e.g. "smollm", "qwen2". */
  readonly preTokenizer: string
}

/** Metadata and tensors of the GGUF file of `weights` (our names and [in, out] layout). */
export const llamaFamilyGguf = (config: ModelConfig, weights: Weights, options: GgufOptions): GgufModel => {
  const arch = ARCH[options.architecture]
  if (arch === undefined) throw new Error(`no GGUF mapping for ${options.architecture} (only ${Object.keys(ARCH).join(", ")})`)
  if (config.ropeScaling !== undefined) throw new Error("rope_scaling is not mapped to GGUF here")
  if (config.qkvBias === true || config.oBias === true) throw new Error("attention biases are not mapped to GGUF here")
  const vocab = fakeVocab(config.vocabSize, [options.bosTokenId, options.eosTokenId])
  const metadata: Array<readonly [string, GgufValue]> = [
    ["general.architecture", gguf.string(arch)],
    ["general.name", gguf.string(options.name)],
    ["general.file_type", gguf.u32(0)], // all F32
    [`${arch}.vocab_size`, gguf.u32(config.vocabSize)],
    [`${arch}.context_length`, gguf.u32(config.contextLength)],
    [`${arch}.embedding_length`, gguf.u32(config.dModel)],
    [`${arch}.block_count`, gguf.u32(config.nLayers)],
    [`${arch}.feed_forward_length`, gguf.u32(config.dFf)],
    [`${arch}.attention.head_count`, gguf.u32(config.nHeads)],
    [`${arch}.attention.head_count_kv`, gguf.u32(config.kvHeads)],
    [`${arch}.attention.key_length`, gguf.u32(config.headDim)],
    [`${arch}.attention.value_length`, gguf.u32(config.headDim)],
    [`${arch}.attention.layer_norm_rms_epsilon`, gguf.f32(config.normEps)],
    [`${arch}.rope.dimension_count`, gguf.u32(config.headDim)],
    [`${arch}.rope.freq_base`, gguf.f32(config.ropeTheta)],
    ["tokenizer.ggml.model", gguf.string("gpt2")],
    ["tokenizer.ggml.pre", gguf.string(options.preTokenizer)],
    ["tokenizer.ggml.tokens", gguf.strings(vocab.tokens)],
    ["tokenizer.ggml.token_type", gguf.i32s(vocab.types)],
    ["tokenizer.ggml.merges", gguf.strings([])],
    ["tokenizer.ggml.bos_token_id", gguf.u32(options.bosTokenId)],
    ["tokenizer.ggml.eos_token_id", gguf.u32(options.eosTokenId)],
    ["tokenizer.ggml.add_bos_token", gguf.bool(false)]
  ]
  const tensors: Array<GgufTensor> = Object.entries(parameterShapes(config)).map(([name, shape]) => {
    const { hf, transpose: t } = hfName(name)
    const hfShape = t ? [shape[1]!, shape[0]!] : [...shape] // Hugging Face's [out, in]
    const reorder = arch === "llama" && (hf.endsWith("q_proj.weight") || hf.endsWith("k_proj.weight"))
    const heads = hf.endsWith("q_proj.weight") ? config.nHeads : config.kvHeads
    return {
      name: ggufTensorName(hf),
      dims: [...hfShape].reverse(),
      data: () => {
        const w = weights[name]!
        const rows = t ? transpose(w, shape[0]!, shape[1]!) : w
        return reorder ? interleaveRotaryRows(rows, heads, hfShape[1]!) : rows
      }
    }
  })
  return { metadata, tensors }
}
