/**
 * A float64 reference of the Llama family's forward pass, written from the published
 * `transformers` definitions (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py,
 * modeling_qwen3.py), over Hugging Face tensor names and nn.Linear's [out, in] layout. It shares
 * no code with the model it checks: slow loops, obvious math.
 *
 *   h = embed_tokens[ids]
 *   per layer:  r = rmsnorm(h)·input_layernorm
 *               q, k, v = r·q_projᵀ (+ bias), …                       (per head, head_dim wide)
 *               q, k = rmsnorm(q)·q_norm, rmsnorm(k)·k_norm           (Qwen3 only)
 *               q, k = q·cos + rotate_half(q)·sin, …                  (inv_freq with rope scaling)
 *               a = softmax(q·kᵀ / √head_dim + causal) · v             (k, v repeated for GQA)
 *               h = h + a·o_projᵀ (+ bias)
 *               r = rmsnorm(h)·post_attention_layernorm
 *               h = h + (silu(r·gate_projᵀ) ⊙ r·up_projᵀ)·down_projᵀ
 *   logits = rmsnorm(h)·norm · lm_headᵀ   (lm_head = embed_tokens when tied)
 */

export interface RefConfig {
  readonly architecture: "LlamaForCausalLM" | "MistralForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM"
  readonly hidden: number
  readonly layers: number
  readonly heads: number
  readonly kvHeads: number
  readonly headDim: number
  readonly ff: number
  readonly vocab: number
  readonly eps: number
  readonly theta: number
  readonly tied: boolean
  readonly bias: { readonly qkv: boolean; readonly o: boolean }
  readonly qkNorm: boolean
  readonly scaling?:
    | { readonly rope_type: "linear"; readonly factor: number }
    | { readonly rope_type: "llama3"; readonly factor: number; readonly low_freq_factor: number; readonly high_freq_factor: number; readonly original_max_position_embeddings: number }
}

/** HF tensors: name → values (row-major, as stored) and shape. */
export type RefTensors = ReadonlyMap<string, { readonly shape: ReadonlyArray<number>; readonly values: ArrayLike<number> }>

/** modeling_rope_utils: _compute_default / _compute_linear_scaling / _compute_llama3_parameters. */
export const refInvFreq = (c: RefConfig): Array<number> => {
  const inv: Array<number> = []
  for (let i = 0; i < c.headDim; i += 2) inv.push(1 / Math.pow(c.theta, i / c.headDim))
  const s = c.scaling
  if (s === undefined) return inv
  if (s.rope_type === "linear") return inv.map((f) => f / s.factor)
  const lowWavelen = s.original_max_position_embeddings / s.low_freq_factor
  const highWavelen = s.original_max_position_embeddings / s.high_freq_factor
  return inv.map((f) => {
    const wavelen = (2 * Math.PI) / f
    const scaled = wavelen > lowWavelen ? f / s.factor : f
    const smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    const isMedium = !(wavelen < highWavelen) && !(wavelen > lowWavelen)
    return isMedium ? (1 - smooth) * (scaled / s.factor) + smooth * scaled : scaled
  })
}

const rmsnorm = (x: Array<number>, w: ArrayLike<number>, eps: number): Array<number> => {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length
  const r = 1 / Math.sqrt(ms + eps)
  return x.map((v, i) => v * r * w[i]!)
}

/** y = x·Wᵀ (+ b) for W [out, in]. */
const linear = (x: Array<number>, t: RefTensors, name: string, withBias: boolean): Array<number> => {
  const w = t.get(`${name}.weight`)
  if (w === undefined) throw new Error(`reference: missing ${name}.weight`)
  const [out, inn] = w.shape as [number, number]
  const b = withBias ? t.get(`${name}.bias`) : undefined
  if (withBias && b === undefined) throw new Error(`reference: missing ${name}.bias`)
  const y = new Array<number>(out)
  for (let o = 0; o < out; o++) {
    let s = b === undefined ? 0 : b.values[o]!
    for (let i = 0; i < inn; i++) s += x[i]! * w.values[o * inn + i]!
    y[o] = s
  }
  return y
}

const silu = (v: number) => v / (1 + Math.exp(-v))

/** Logits [ids.length][vocab] of one sequence from position 0. */
export const referenceForward = (c: RefConfig, t: RefTensors, ids: ReadonlyArray<number>): Array<Array<number>> => {
  const vec = (name: string) => t.get(name)!.values
  const emb = t.get("model.embed_tokens.weight")!
  const n = ids.length
  let h = ids.map((id) => Array.from({ length: c.hidden }, (_, j) => emb.values[id * c.hidden + j]!))
  const inv = refInvFreq(c)
  const rope = (x: Array<number>, pos: number): Array<number> => {
    const half = c.headDim / 2
    return x.map((v, i) => {
      const f = inv[i % half]! * pos
      const rotated = i < half ? -x[i + half]! : x[i - half]!
      return v * Math.cos(f) + rotated * Math.sin(f)
    })
  }
  const group = c.heads / c.kvHeads
  for (let l = 0; l < c.layers; l++) {
    const p = `model.layers.${l}`
    const r = h.map((x) => rmsnorm(x, vec(`${p}.input_layernorm.weight`), c.eps))
    const heads = (x: Array<number>, count: number) => Array.from({ length: count }, (_, k) => x.slice(k * c.headDim, (k + 1) * c.headDim))
    const q = r.map((x) => heads(linear(x, t, `${p}.self_attn.q_proj`, c.bias.qkv), c.heads))
    const k = r.map((x) => heads(linear(x, t, `${p}.self_attn.k_proj`, c.bias.qkv), c.kvHeads))
    const v = r.map((x) => heads(linear(x, t, `${p}.self_attn.v_proj`, c.bias.qkv), c.kvHeads))
    const qr = q.map((hs, pos) => hs.map((x) => rope(c.qkNorm ? rmsnorm(x, vec(`${p}.self_attn.q_norm.weight`), c.eps) : x, pos)))
    const kr = k.map((hs, pos) => hs.map((x) => rope(c.qkNorm ? rmsnorm(x, vec(`${p}.self_attn.k_norm.weight`), c.eps) : x, pos)))
    const attn = qr.map((qh, i) =>
      qh.flatMap((qv, head) => {
        const kvh = Math.floor(head / group) // repeat_kv
        const scores = Array.from({ length: i + 1 }, (_, j) => qv.reduce((s, a, d) => s + a * kr[j]![kvh]![d]!, 0) / Math.sqrt(c.headDim))
        const max = Math.max(...scores)
        const e = scores.map((s) => Math.exp(s - max))
        const z = e.reduce((a, b) => a + b, 0)
        return Array.from({ length: c.headDim }, (_, d) => e.reduce((s, w, j) => s + (w / z) * v[j]![kvh]![d]!, 0))
      })
    )
    h = h.map((x, i) => linear(attn[i]!, t, `${p}.self_attn.o_proj`, c.bias.o).map((y, j) => x[j]! + y))
    const m = h.map((x) => rmsnorm(x, vec(`${p}.post_attention_layernorm.weight`), c.eps))
    h = h.map((x, i) => {
      const gate = linear(m[i]!, t, `${p}.mlp.gate_proj`, false)
      const up = linear(m[i]!, t, `${p}.mlp.up_proj`, false)
      const down = linear(gate.map((g, j) => silu(g) * up[j]!), t, `${p}.mlp.down_proj`, false)
      return x.map((v, j) => v + down[j]!)
    })
  }
  const head = c.tied ? "model.embed_tokens" : "lm_head"
  return Array.from({ length: n }, (_, i) => linear(rmsnorm(h[i]!, vec("model.norm.weight"), c.eps), t, head, false))
}
