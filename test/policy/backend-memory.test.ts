/**
 * Micro-batches and KV caches sized from the backend's memory: the per-token estimate against
 * the peak tfjs itself measures for a real training micro-batch on wasm, the fit's arithmetic on
 * real model shapes and GPU sizes, where each backend's memory figure comes from (including
 * `nvidia-smi`, which cannot run here: a script in its place prints what the real one prints for
 * that query), and the environment overrides' errors.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  backendMemory,
  decodeHfConfig,
  fitMicroBatchTokens,
  rollbackFitsOnDevice,
  initAdapters,
  LoraConfig,
  kvCacheBytes,
  makeConfig,
  memoryNeed,
  microBatchGradients,
  nvidiaGpuBytes,
  packSequences,
  trainingBytesPerToken,
  Transformer
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { BACKEND } from "./model-fixtures.js"

const GIB = 1024 ** 3
const MIB = 1024 ** 2

const SMOLLM2_135M = decodeHfConfig({
  architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30,
  num_attention_heads: 9, num_key_value_heads: 3, hidden_act: "silu", max_position_embeddings: 8192, rms_norm_eps: 1e-5,
  rope_theta: 100000, tie_word_embeddings: true, vocab_size: 49152, torch_dtype: "bfloat16"
}).config
const QWEN3_06B = decodeHfConfig({
  architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28,
  num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, hidden_act: "silu", max_position_embeddings: 40960,
  rms_norm_eps: 1e-6, rope_theta: 1000000, tie_word_embeddings: true, vocab_size: 151936, attention_bias: false, torch_dtype: "bfloat16"
}).config

describe("the per-token training memory estimate", () => {
  // Shapes that stress each term: depth, width, MLP width, vocabulary, heads × row length.
  const shapes = [
    { vocabSize: 768, dModel: 128, nLayers: 2, nHeads: 4, dFf: 352, seqLen: 256, rows: 4 },
    { vocabSize: 768, dModel: 128, nLayers: 4, nHeads: 4, dFf: 1024, seqLen: 256, rows: 4 },
    { vocabSize: 768, dModel: 128, nLayers: 2, nHeads: 16, dFf: 352, seqLen: 1024, rows: 1 },
    { vocabSize: 32768, dModel: 128, nLayers: 1, nHeads: 4, dFf: 352, seqLen: 256, rows: 2 },
    { vocabSize: 49152, dModel: 192, nLayers: 2, nHeads: 6, dFf: 512, seqLen: 128, rows: 2, nKvHeads: 2 }
  ]
  for (const { seqLen, rows, ...shape } of shapes) {
    it(`bounds tfjs's measured peak of one micro-batch, within 2.5× (V ${shape.vocabSize}, d ${shape.dModel}, L ${shape.nLayers}, H ${shape.nHeads}, ff ${shape.dFf}, ${rows} × ${seqLen})`, async () => {
      expect(BACKEND).toBe("wasm")
      const config = makeConfig({ ...shape, contextLength: seqLen })
      const model = Transformer.init(config, 1)
      try {
        const sequences = Array.from({ length: rows }, (_, r) => ({
          tokens: Int32Array.from({ length: seqLen + 1 }, (_, i) => (i * 7 + r) % shape.vocabSize),
          weights: new Float32Array(seqLen + 1).fill(1e-3)
        }))
        const [batch] = packSequences(sequences, { maxTokens: rows * seqLen, maxSeqLen: seqLen })
        const weights = tf.memory().numBytes
        const profile = await tf.profile(async () => {
          const r = await microBatchGradients(model, batch!, { kind: "sft" })
          for (const g of r.grads.values()) g.dispose()
        })
        const measured = profile.peakBytes - weights // activations and the weights' gradients
        const activations = trainingBytesPerToken(config, seqLen) * rows * seqLen
        const planned = activations + memoryNeed(config).fullTrainingBytes - memoryNeed(config).servingBytes / 2 // all but the weights
        expect(measured).toBeLessThanOrEqual(planned)
        expect(activations).toBeLessThanOrEqual(2.5 * measured)
      } finally {
        model.dispose()
      }
    }, 60_000)
  }
})

describe("the per-token estimate with LoRA, the base multiplied in place and the head fused", () => {
  it("bounds tfjs's measured peak of one micro-batch, within 2.5×, where the unfused estimate is over twice as large (V 32768, 2 × 256)", async () => {
    expect(BACKEND).toBe("wasm")
    const config = makeConfig({ vocabSize: 32768, dModel: 128, nLayers: 2, nHeads: 4, dFf: 352, contextLength: 256 })
    const model = Transformer.init(config, 1)
    try {
      const lora = new LoraConfig({ rank: 8, alpha: 16 })
      model.attachLora(lora, initAdapters(config, lora, 1))
      model.products = "heap"
      const sequences = Array.from({ length: 2 }, (_, r) => ({
        tokens: Int32Array.from({ length: 257 }, (_, i) => (i * 7 + r) % config.vocabSize),
        weights: new Float32Array(257).fill(1e-3)
      }))
      const [batch] = packSequences(sequences, { maxTokens: 512, maxSeqLen: 256 })
      const weights = tf.memory().numBytes
      const profile = await tf.profile(async () => {
        const r = await microBatchGradients(model, batch!, { kind: "sft" })
        for (const g of r.grads.values()) g.dispose()
      })
      const measured = profile.peakBytes - weights
      const activations = trainingBytesPerToken(config, 256, { fusedHead: true }) * 512
      expect(measured).toBeLessThanOrEqual(activations)
      expect(activations).toBeLessThanOrEqual(2.5 * measured)
      expect(trainingBytesPerToken(config, 256)).toBeGreaterThan(2 * trainingBytesPerToken(config, 256, { fusedHead: true }))
    } finally {
      model.dispose()
    }
  }, 60_000)
})

describe("fitting a micro-batch", () => {
  it("wasm: a small model is bound by speed at 4096 tokens; SmolLM2-135M by the heap, never below one row", () => {
    const small = makeConfig({ vocabSize: 768, dModel: 128, nLayers: 2, nHeads: 4, dFf: 352, contextLength: 640 })
    expect(fitMicroBatchTokens(small, { memoryBytes: 4 * GIB, seqLen: 640, lora: false, speedTokens: 4096 })).toMatchObject({ tokens: 4096, boundBy: "speed" })
    const lora = fitMicroBatchTokens(SMOLLM2_135M, { memoryBytes: 4 * GIB, seqLen: 512, lora: true, speedTokens: 4096 })
    expect(lora.boundBy).toBe("memory")
    // 3 GiB planned, 1.1 GiB of weights: what is left over the estimate's bytes per token
    expect(lora.tokens).toBe(Math.floor((3 * GIB - memoryNeed(SMOLLM2_135M).servingBytes) / trainingBytesPerToken(SMOLLM2_135M, 512)))
    expect(lora.tokens).toBeGreaterThan(512)
    expect(lora.tokens).toBeLessThan(4096)
    const full = fitMicroBatchTokens(SMOLLM2_135M, { memoryBytes: 4 * GIB, seqLen: 2048, lora: false, speedTokens: 4096 })
    expect(full.tokens).toBe(2048) // one row, whatever the estimate says
  })

  it("GPUs: Qwen3-0.6B on 141 GiB is bound by memory; WebGPU's 2 GiB binding limit bounds the logits", () => {
    const h200 = fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 141 * GIB, seqLen: 4096, lora: false })
    expect(h200.boundBy).toBe("memory")
    expect(h200.tokens).toBe(Math.floor((0.75 * 141 * GIB - memoryNeed(QWEN3_06B).fullTrainingBytes) / trainingBytesPerToken(QWEN3_06B, 4096)))
    expect(h200.tokens).toBeGreaterThan(3 * 4096) // the vocabulary-wide rows dominate: ~7.9 MB a token
    // the device's rollback point kept on the GPU (the weights and both moments before the update) comes out of the activations
    const kept = fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 141 * GIB, seqLen: 4096, lora: false, rollbackOnDevice: true })
    expect(h200.activationBytes - kept.activationBytes).toBe(memoryNeed(QWEN3_06B).parameters * 4 * 3)
    expect(kept.tokens).toBe(Math.floor(kept.activationBytes / trainingBytesPerToken(QWEN3_06B, 4096)))
    expect(fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 141 * GIB, seqLen: 4096, lora: true, rollbackOnDevice: true })).toEqual(
      fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 141 * GIB, seqLen: 4096, lora: true })
    )
    // kept there where the memory holds it beside the micro-batch (one row, or the tokens the request fixes); else copied to the host
    expect(rollbackFitsOnDevice(QWEN3_06B, { memoryBytes: 80 * GIB, seqLen: 4096, lora: false })).toBe(true)
    expect(rollbackFitsOnDevice(QWEN3_06B, { memoryBytes: 80 * GIB, seqLen: 4096, lora: false, tokens: 8192 })).toBe(false) // 2 rows: 65 GB of activations
    expect(rollbackFitsOnDevice(QWEN3_06B, { memoryBytes: 80 * GIB, seqLen: 40960, lora: false })).toBe(false) // a row at its whole context fits no card: decided per request
    expect(rollbackFitsOnDevice(QWEN3_06B, { memoryBytes: 16 * GIB, seqLen: 4096, lora: false })).toBe(false) // 12 GB of weights, gradients and moments + 7 kept > ¾ of 16
    expect(rollbackFitsOnDevice(QWEN3_06B, { memoryBytes: 16 * GIB, seqLen: 4096, lora: true })).toBe(true)
    expect(rollbackFitsOnDevice(SMOLLM2_135M, { memoryBytes: 4 * GIB, seqLen: 2048, lora: false })).toBe(false) // wasm's heap
    expect(rollbackFitsOnDevice(makeConfig({ vocabSize: 768, dModel: 128, nLayers: 2, nHeads: 4, dFf: 352, contextLength: 640 }), { memoryBytes: 4 * GIB, seqLen: 640, lora: false })).toBe(true)
    const webgpu = fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 141 * GIB, seqLen: 1024, lora: false, maxTensorBytes: 2 * GIB })
    expect(webgpu).toMatchObject({ tokens: Math.floor((2 * GIB) / (4 * 151936)), boundBy: "tensor size" })
    // a card too small for the weights and optimizer still gets one row (and the backend's own error if it fails)
    expect(fitMicroBatchTokens(QWEN3_06B, { memoryBytes: 8 * GIB, seqLen: 1024, lora: false })).toMatchObject({ tokens: 1024, activationBytes: 0 })
  })
})

describe("the backend's memory", () => {
  it("wasm: its 4 GiB heap, or REINS_DEVICE_MEMORY_MB up to that; cpu: half of this machine's", () => {
    expect(backendMemory("wasm", {})).toEqual({ bytes: 4 * GIB, source: "the wasm32 heap", speedTokens: 4096 })
    expect(backendMemory("wasm", { REINS_DEVICE_MEMORY_MB: "1024" })).toMatchObject({ bytes: GIB, source: "REINS_DEVICE_MEMORY_MB", speedTokens: 4096 })
    expect(() => backendMemory("wasm", { REINS_DEVICE_MEMORY_MB: "8192" })).toThrow("REINS_DEVICE_MEMORY_MB=8192: at most 4096 MiB here")
    expect(() => backendMemory("cpu", { REINS_DEVICE_MEMORY_MB: "lots" })).toThrow("REINS_DEVICE_MEMORY_MB=lots: expected a positive number of MiB")
    expect(() => backendMemory("cpu", { REINS_DEVICE_MEMORY_MB: "-5" })).toThrow("expected a positive number of MiB")
    expect(backendMemory("cpu", {})).toMatchObject({ bytes: Math.floor(os.totalmem() / 2), source: "half of this machine's memory" })
    expect(backendMemory("cpu", { REINS_DEVICE_MEMORY_MB: "65536" }).bytes).toBe(64 * GIB)
  })

  it("a GPU's memory from nvidia-smi, the first one CUDA_VISIBLE_DEVICES shows; none without nvidia-smi", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-nvidia-smi-"))
    try {
      // what `nvidia-smi --query-gpu=index,memory.total --format=csv,noheader,nounits` prints on a two-card machine
      const smi = path.join(dir, "nvidia-smi")
      writeFileSync(smi, `#!/bin/sh\n[ "$1" = "--query-gpu=index,memory.total" ] || exit 9\nprintf '0, 143771\\n1, 81559\\n'\n`)
      chmodSync(smi, 0o755)
      expect(nvidiaGpuBytes({ PATH: dir })).toBe(143771 * MIB)
      expect(nvidiaGpuBytes({ PATH: dir, CUDA_VISIBLE_DEVICES: "1" })).toBe(81559 * MIB)
      expect(nvidiaGpuBytes({ PATH: path.join(dir, "nothing-here") })).toBeUndefined()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("KV caches: REINS_KV_CACHE_MB up to the decoder's 4 GiB, else that or a quarter of this machine's memory", () => {
    expect(kvCacheBytes({})).toBe(Math.min(4 * GIB, Math.floor(os.totalmem() / 4)))
    expect(kvCacheBytes({ REINS_KV_CACHE_MB: "100" })).toBe(100 * MIB)
    expect(() => kvCacheBytes({ REINS_KV_CACHE_MB: "8192" })).toThrow("REINS_KV_CACHE_MB=8192: at most 4096 MiB here")
    expect(() => kvCacheBytes({ REINS_KV_CACHE_MB: "0" })).toThrow("REINS_KV_CACHE_MB=0: expected a positive number of MiB")
  })

  it("KV caches on a GPU (the tensor decode path): a quarter of the device's memory, or REINS_KV_CACHE_MB beyond wasm's 4 GiB", () => {
    const h200 = { bytes: 143771 * MIB, source: "nvidia-smi" }
    expect(kvCacheBytes({}, h200)).toBe(Math.floor((143771 * MIB) / 4))
    expect(kvCacheBytes({ REINS_KV_CACHE_MB: "20000" }, h200)).toBe(20000 * MIB)
    expect(() => kvCacheBytes({ REINS_KV_CACHE_MB: "-1" }, h200)).toThrow("REINS_KV_CACHE_MB=-1: expected a positive number of MiB")
  })
})
