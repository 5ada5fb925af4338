/**
 * One policy version's weights as the WebGPU decoder's shaders read them (webgpuDecode.ts):
 * [out, in] layout, q/k/v concatenated, gate/up concatenated, the head (the embedding itself when
 * tied), made by tfjs ops on the device from the model's parameters (merged with LoRA adapters).
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"

/** One policy version's weights on the device, [out, in]; `refs` hold their memory. */
export interface DeviceWeights {
  readonly embed: GPUBuffer
  readonly layers: ReadonlyArray<Readonly<Record<"attnNorm" | "qkv" | "qkvBias" | "qNorm" | "kNorm" | "o" | "oBias" | "mlpNorm" | "gateUp" | "down", GPUBuffer>>>
  readonly norm: GPUBuffer
  readonly head: GPUBuffer
  readonly refs: ReadonlyArray<tf.Tensor>
}

/** The weights as the shaders read them, made by tfjs ops from the parameters by name. */
export const deviceWeights = (c: ModelConfig, param: (name: string) => tf.Tensor): DeviceWeights => {
  const refs: Array<tf.Tensor> = []
  const buffer = (make: () => tf.Tensor): GPUBuffer => {
    const t = tf.tidy(make)
    try {
      // small tensors may still live on the CPU (tfjs runs small ops there): upload first
      ;(tf.backend() as unknown as { uploadToGPU(dataId: object): void }).uploadToGPU(t.dataId)
      // a copy of the tensor's memory that tfjs keeps until `tensorRef` is disposed
      const { tensorRef, buffer } = t.dataToGPU()
      refs.push(tensorRef)
      return buffer as GPUBuffer
    } finally {
      t.dispose()
    }
  }
  const outIn = (...names: Array<string>) => buffer(() => tf.transpose(names.length === 1 ? param(names[0]!) : tf.concat(names.map(param), 1)))
  const orZeros = (names: Array<string>, size: number) => buffer(() => (names.every((n) => hasParam(c, n)) ? tf.concat(names.map((n) => param(n).flatten())) : tf.zeros([size])))
  const layers = Array.from({ length: c.nLayers }, (_, l) => {
    const p = `layers.${l}`
    const qkv = [`${p}.attn.wq`, `${p}.attn.wk`, `${p}.attn.wv`]
    return {
      attnNorm: buffer(() => tf.clone(param(`${p}.attn_norm.weight`))),
      qkv: outIn(...qkv),
      qkvBias: orZeros([`${p}.attn.bq`, `${p}.attn.bk`, `${p}.attn.bv`], c.qDim + 2 * c.kvDim),
      qNorm: orZeros([`${p}.attn.q_norm.weight`], c.headDim),
      kNorm: orZeros([`${p}.attn.k_norm.weight`], c.headDim),
      o: outIn(`${p}.attn.wo`),
      oBias: orZeros([`${p}.attn.bo`], c.dModel),
      mlpNorm: buffer(() => tf.clone(param(`${p}.mlp_norm.weight`))),
      gateUp: outIn(`${p}.mlp.w1`, `${p}.mlp.w3`),
      down: outIn(`${p}.mlp.w2`)
    }
  })
  const embed = buffer(() => tf.clone(param("tok_embeddings.weight")))
  const head = c.tieEmbeddings ? embed : outIn("lm_head.weight")
  return { embed, layers, norm: buffer(() => tf.clone(param("norm.weight"))), head, refs }
}

const hasParam = (c: ModelConfig, name: string) => name in parameterShapes(c)
