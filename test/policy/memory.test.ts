/**
 * Models too large for the wasm heap fail before any weight is read, with what they need and
 * what can hold them: Qwen3-0.6B's real config (no weights in the directory, so a device that
 * read on would fail on the missing file instead) through a real device worker, and the
 * estimate's arithmetic on SmolLM2-135M (fits) and Qwen3-0.6B (fits for serving and for LoRA
 * training, with products in place; not for training every weight).
 */
import { expect, it } from "@effect/vitest"
import {
  decodeHfConfig, Device, deviceHandlers, deviceWorkerLayer, fitMicroBatchTokens, memoryNeed, readModelConfig, trainingBytesPerToken, WASM_HEAP_BYTES, WASM_TENSOR_SHARE, wasmMicroBatchMisfit, wasmMisfit,
  wasmPacksWeights
} from "@reins/policy"
import { ScoreRequest, TrainRequest, TrainSample, TrainSettings } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Cause, Effect, Exit, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe } from "vitest"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "reins-memory-"))
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

const QWEN3_06B = {
  architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28,
  num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, hidden_act: "silu", max_position_embeddings: 40960,
  rms_norm_eps: 1e-6, rope_theta: 1000000, tie_word_embeddings: true, vocab_size: 151936, attention_bias: false,
  use_sliding_window: false, sliding_window: null, torch_dtype: "bfloat16", bos_token_id: 151643, eos_token_id: 151645
}
const SMOLLM2_135M = {
  architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30,
  num_attention_heads: 9, num_key_value_heads: 3, hidden_act: "silu", max_position_embeddings: 8192, rms_norm_eps: 1e-5,
  rope_theta: 100000, tie_word_embeddings: true, vocab_size: 49152, torch_dtype: "bfloat16", bos_token_id: 1, eos_token_id: 2
}

/** Runs `effect` with REINS_DEVICE_MEMORY_MB set to `mib`, then puts the variable back as it was. */
const withDeviceMemoryMb = <A, E, R>(mib: number, effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const before = process.env["REINS_DEVICE_MEMORY_MB"]
      process.env["REINS_DEVICE_MEMORY_MB"] = String(mib)
      return before
    }),
    () => effect,
    (before) =>
      Effect.sync(() => {
        if (before === undefined) delete process.env["REINS_DEVICE_MEMORY_MB"]
        else process.env["REINS_DEVICE_MEMORY_MB"] = before
      })
  )

describe("the wasm heap", () => {
  it("SmolLM2-135M fits for full training; Qwen3-0.6B for serving and LoRA, and the message says why not for full training", () => {
    const smol = decodeHfConfig(SMOLLM2_135M).config
    expect(Math.round(memoryNeed(smol).parameters / 1e6)).toBe(135) // published: 134.5M
    expect(wasmMisfit(smol, { lora: false })).toBeUndefined()
    expect(wasmPacksWeights(smol)).toBe(true) // its decoder keeps tfjs's (faster) matmul
    expect(memoryNeed(smol).loraTrainingBytes).toBe(memoryNeed(smol).servingBytes) // with the packed copies
    const qwen = decodeHfConfig(QWEN3_06B).config
    const need = memoryNeed(qwen)
    expect(Math.round(need.parameters / 1e6)).toBe(596) // published: 0.6B (0.44B without embeddings)
    // In place: the weights once ([out, in], a tied head is the embedding itself); no fused q/k/v, no merged adapters, no transpose.
    expect(need.inPlaceServingBytes).toBe(need.parameters * 4)
    expect(wasmMisfit(qwen, { lora: false, serveOnly: true })).toBeUndefined()
    expect(wasmPacksWeights(qwen)).toBe(false)
    expect(need.loraTrainingBytes).toBe(need.inPlaceServingBytes)
    expect(wasmMisfit(qwen, { lora: true })).toBeUndefined() // 2.2 GiB of weights, within 3/4 of the heap
    expect(wasmMisfit(qwen, { lora: false })).toMatch(/596M parameters: training all its weights \(serving alone: 2\.2 GiB\) needs at least 11\.1 GiB of the wasm backend's 4\.0 GiB heap\. Use the tensorflow backend \(REINS_BACKEND=tensorflow .*or train LoRA adapters/)
    // With LoRA: the micro-batch the rest of the heap holds with the head fused (one 256-token row at least; its activations are a bound, not a promise).
    const fit = fitMicroBatchTokens(qwen, { memoryBytes: WASM_HEAP_BYTES, seqLen: 256, lora: true, inPlace: true })
    expect(fit.activationBytes).toBe(Math.floor(WASM_HEAP_BYTES * 0.75) - need.inPlaceServingBytes)
    expect(fit.tokens).toBe(256)
    expect(trainingBytesPerToken(qwen, 256, { fusedHead: true })).toBeLessThan(trainingBytesPerToken(qwen, 256) / 1.9)
    // A model whose weights alone leave no room for a micro-batch is refused for LoRA, saying so.
    const bigger = decodeHfConfig({ ...QWEN3_06B, num_hidden_layers: 46 }).config
    expect(wasmMisfit(bigger, { lora: true, serveOnly: true })).toBeUndefined()
    expect(wasmMisfit(bigger, { lora: true })).toMatch(/serving it while training LoRA adapters needs 3\.\d GiB for the weights alone, more than the 3\.0 GiB of the wasm backend's 4\.0 GiB heap that leave room for a micro-batch\. Use the tensorflow backend/)
    // A model too large to serve at all says so, without suggesting LoRA.
    const big = decodeHfConfig({ ...QWEN3_06B, num_hidden_layers: 66 }).config
    const refusal = wasmMisfit(big, { lora: false, serveOnly: true })
    expect(refusal).toMatch(/serving it needs at least 4\.4 GiB of the wasm backend's 4\.0 GiB heap\. Use the tensorflow backend/)
    expect(refusal).not.toMatch(/LoRA/)
  })

  it("a training row the heap would not hold is refused, naming the longest that fits (Qwen3-0.6B, LoRA in place)", () => {
    const qwen = decodeHfConfig(QWEN3_06B).config
    const shape = (seqLen: number) => ({ seqLen, lora: true, inPlace: true })
    // Measured when the weights took 2.8 GiB (the tied head's transpose held beside them): rows of 256 and 272 tokens
    // trained, a 296-token one ran out of the heap, and the estimate allowed 264. Held [out, in], they take 2.2 GiB.
    expect(wasmMicroBatchMisfit(qwen, 1, shape(256))).toBeUndefined() // what the bench runs
    expect(wasmMicroBatchMisfit(qwen, 1, shape(432))).toMatch(/^a micro-batch of 1 × 432 tokens needs about 3\.\d GiB \(2\.2 GiB of weights, \d\.\d GiB of activations by the estimate\), more than the 3\.7 GiB tensors can use of the wasm backend's 4\.0 GiB heap; running out of it would end the wasm backend\. Train rows of at most 424 tokens here \(the trainer's max_seq_len\), or use the tensorflow backend/)
    expect(wasmMicroBatchMisfit(qwen, 1, shape(1024))).toMatch(/1 × 1024 tokens needs about 5\.\d GiB .*at most 424 tokens/)
    // Rows side by side count together; a lowered heap is named by its variable.
    expect(wasmMicroBatchMisfit(qwen, 2, shape(220))).toMatch(/2 × 220 tokens/)
    expect(wasmMicroBatchMisfit(qwen, 1, { ...shape(256), heapBytes: 3.3 * 1024 ** 3 })).toMatch(/of the 3\.3 GiB the wasm backend may use \(REINS_DEVICE_MEMORY_MB\); .*at most \d+ tokens/)
    expect(wasmMicroBatchMisfit(qwen, 1, { ...shape(8), heapBytes: 2.4 * 1024 ** 3 })).toMatch(/Not even a row of 8 tokens fits: use the tensorflow backend/)
  })

  it.effect("a device that only serves reads such a model on (and fails on the first missing file, naming it)", () =>
    Effect.gen(function*() {
      const dir = path.join(tmp, "qwen3-0.6b-serve")
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(QWEN3_06B))
      const error = yield* Effect.flip(Effect.scoped(deviceHandlers({ modelDir: dir, backend: "wasm", serveOnly: true })))
      expect(error.message).not.toMatch(/heap/)
      expect(error.message).toMatch(/cannot read .*qwen3-0\.6b-serve\/tokenizer\.json/)
    }), 60_000)

  it.effect("a serving-only device whose model fits for serving alone refuses Train and Score, saying why (REINS_DEVICE_MEMORY_MB)", () =>
    Effect.gen(function*() {
      const dir = path.join(tmp, "serve-only")
      yield* Effect.scoped(deviceHandlers({ modelDir: dir, backend: "wasm", createDefault: true })) // writes the default model
      const need = memoryNeed(yield* readModelConfig(dir))
      // A heap between what serving needs and what training every weight needs.
      const mib = (need.inPlaceServingBytes + need.fullTrainingBytes) / 2 / 1024 ** 2
      yield* withDeviceMemoryMb(mib, Effect.gen(function*() {
        const refused = yield* Effect.flip(Effect.scoped(deviceHandlers({ modelDir: dir, backend: "wasm" })))
        expect(refused.message).toMatch(/serve-only: the model has \d+M parameters: training all its weights .* of the [\d.]+ MiB the wasm backend may use \(REINS_DEVICE_MEMORY_MB\)/)
        yield* Effect.scoped(Effect.gen(function*() {
          const device = yield* deviceHandlers({ modelDir: dir, backend: "wasm", serveOnly: true })
          const score = yield* Effect.flip(device.Score(new ScoreRequest({ sequences: [Int32Array.from([1, 2, 3])] })))
          expect(score.message).toMatch(/^Score: this device only serves .*serve-only, which fits the wasm backend for that alone: .*training all its weights/)
          const sample = new TrainSample({ tokens: Int32Array.from([1, 2, 3]), weights: Float32Array.from([0, 1, 1]) })
          const settings = new TrainSettings({ objective: { kind: "sft" }, lr: 1e-3, weightDecay: 0, maxGradNorm: 1, maxSeqLen: 8 })
          const train = yield* Effect.flip(device.Train(new TrainRequest({ steps: [[sample]], settings })))
          expect(train.message).toMatch(/^Train: this device only serves .*REINS_DEVICE_MEMORY_MB/)
          expect((yield* device.Info()).memoryBytes).toBe(Math.floor(mib * 1024 ** 2)) // and it serves on
        }))
      }))
    }), 60_000)

  it.effect("a Train whose row the heap would not hold fails with the reason, and the device trains on (REINS_DEVICE_MEMORY_MB)", () =>
    Effect.gen(function*() {
      const dir = path.join(tmp, "long-rows")
      yield* Effect.scoped(deviceHandlers({ modelDir: dir, backend: "wasm", createDefault: true })) // writes the default model
      const config = yield* readModelConfig(dir)
      // Room beside the weights and optimizer for ~100 tokens of activations (full training).
      const mib = (memoryNeed(config).fullTrainingBytes + 100 * trainingBytesPerToken(config, 128)) / WASM_TENSOR_SHARE / 1024 ** 2
      yield* withDeviceMemoryMb(mib, Effect.scoped(Effect.gen(function*() {
        const device = yield* deviceHandlers({ modelDir: dir, backend: "wasm" })
        const request = (length: number) =>
          new TrainRequest({
            steps: [[new TrainSample({ tokens: Int32Array.from({ length }, (_, i) => (i % 50) + 1), weights: new Float32Array(length).fill(1) })]],
            settings: new TrainSettings({ objective: { kind: "sft" }, lr: 1e-3, weightDecay: 0, maxGradNorm: 1, maxSeqLen: config.contextLength })
          })
        const refused = yield* Effect.flip(device.Train(request(201)))
        expect(refused.message).toMatch(/^Train: a micro-batch of 1 × 200 tokens needs about .* more than the [\d.]+ MiB tensors can use of the [\d.]+ MiB the wasm backend may use \(REINS_DEVICE_MEMORY_MB\); running out of it would end the wasm backend\. Train rows of at most \d+ tokens here/)
        expect((yield* device.Info()).version).toBe(0) // nothing trained
        const trained = yield* device.Train(request(33))
        expect(trained.version).toBe(1)
      })))
    }), 60_000)

  it.effect("a device refuses such a model before reading its weights", () =>
    Effect.gen(function*() {
      const dir = path.join(tmp, "qwen3-0.6b")
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(QWEN3_06B))
      // The handlers' build, as the device's worker thread runs it.
      const error = yield* Effect.flip(Effect.scoped(deviceHandlers({ modelDir: dir, backend: "wasm" })))
      expect(error.message).toMatch(/qwen3-0\.6b: the model has 596M parameters: training all its weights .*wasm backend's 4\.0 GiB heap/)
    }), 60_000)

  it.effect("through a worker thread, a call to that device fails at once with the reason (no hang)", () =>
    Effect.gen(function*() {
      const dir = path.join(tmp, "qwen3-0.6b-worker")
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(QWEN3_06B))
      const info = Effect.flatMap(Device.client, (d) => d.Info())
      const exit = yield* Effect.exit(info.pipe(Effect.provide(deviceWorkerLayer({ modelDir: dir }, Device).pipe(Layer.provideMerge(ActorSystem.layerLocal())))))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "").toMatch(/could not start: .*qwen3-0\.6b-worker: the model has 596M parameters/s)
    }), 60_000)
})
