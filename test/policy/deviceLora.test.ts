/**
 * A LoRA device, through a real worker thread: the base model loaded from its directory with
 * fresh adapters (B = 0, so it serves the base exactly), Train moves only the adapters (the
 * served policy changes, the base files never), generated tokens carry the new version, Save
 * writes a PEFT adapter + optimizer state (no full weights), Restore brings that policy back,
 * SetWeights is refused, and the checkpoint loads as a model directory (base with the adapter
 * merged) for evaluation and export.
 */
import { expect } from "@effect/vitest"
import { Device, deviceClient, deviceWorkerLayer, GenerationConfig, initModelDir, loadModelDir, makeConfig, trainBpe } from "@reins/policy"
import { DeviceWeights, GenerateRequest, RestoreRequest, SamplingParams, SaveRequest, ScoreRequest, TrainRequest, TrainSample, TrainSettings } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Chunk, Context, Effect, Layer, Stream } from "effect"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { describeWithLayer } from "../describeWithLayer.js"

class Dirs extends Context.Tag("test/LoraDirs")<Dirs, { readonly root: string }>() {}

const tokenizer = trainBpe("the cat sat on the mat. the dog sat on the log. <|im_start|>user\nhello<|im_end|>\n".repeat(4), { vocabSize: 300 })

const TestLayer = Layer.unwrapScoped(Effect.gen(function*() {
  const root = yield* Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(path.join(os.tmpdir(), "reins-device-lora-"))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )
  const config = makeConfig({ vocabSize: tokenizer.vocabSize, dModel: 32, nLayers: 2, nHeads: 4, nKvHeads: 2, dFf: 64, contextLength: 128 })
  const generationConfig = new GenerationConfig({ eosTokenIds: [], temperature: 1, topP: 1, topK: 0, maxNewTokens: 16 })
  yield* initModelDir(path.join(root, "base"), { tokenizer, config, seed: 3, generationConfig })
  const lora = { rank: 4, alpha: 8, dropout: 0, targets: ["q_proj", "v_proj", "o_proj", "down_proj"] }
  return deviceWorkerLayer({ modelDir: path.join(root, "base"), lora }).pipe(Layer.provideMerge(ActorSystem.layerLocal()), Layer.merge(Layer.succeed(Dirs, { root })))
}))

const PROMPT = Int32Array.from([5, 17, 42, 99, 120, 33, 8, 61])
const SEQ = Int32Array.from([...PROMPT, 70, 71, 72, 73, 74, 75])
const settings = new TrainSettings({ objective: { kind: "sft" }, lr: 1e-2, weightDecay: 0, maxGradNorm: 1, microBatchTokens: 256, maxSeqLen: 64 })
const sample = new TrainSample({ tokens: SEQ, weights: Float32Array.from(SEQ, (_, i) => (i >= PROMPT.length ? 1 / 6 : 0)) })
const actionLogprob = (lp: Float32Array) => lp.subarray(PROMPT.length).reduce((s, x) => s + x, 0)

describeWithLayer("a LoRA device", TestLayer, 60_000, (it) => {
  it.effect("trains only its adapters, saves them in PEFT layout and restores them", () =>
    Effect.gen(function*() {
      const { root } = yield* Dirs
      const base = path.join(root, "base")
      const baseBytes = readFileSync(path.join(base, "model.safetensors"))
      const client = yield* deviceClient(Device)
      const score = () => Effect.map(client.score(new ScoreRequest({ sequences: [SEQ] })), (r) => actionLogprob(r.logprobs[0]!))
      const start = (yield* client.info).version
      const before = yield* score()

      for (let i = 0; i < 3; i++) yield* client.train(new TrainRequest({ steps: [[sample]], settings }))
      const trained = yield* score()
      expect(trained).toBeGreaterThan(before + 0.5)
      const out = yield* Stream.runCollect(
        client.generate(new GenerateRequest({ requestId: "g", promptIds: PROMPT, params: new SamplingParams({ maxTokens: 4, temperature: 0, topP: 1, topK: 0, seed: 1, stop: [], topLogprobs: 0 }) }))
      )
      expect(Chunk.toReadonlyArray(out).flatMap((c) => [...c.versions])).toEqual([start + 3, start + 3, start + 3, start + 3])

      const ckpt = path.join(root, "ckpt")
      const saved = yield* client.save(new SaveRequest({ dir: ckpt, optimizer: true }))
      expect(saved.version).toBe(start + 3)
      expect(readdirSync(ckpt).sort()).toEqual(["adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors"])
      const adapterConfig = JSON.parse(readFileSync(path.join(ckpt, "adapter_config.json"), "utf8"))
      expect(adapterConfig).toMatchObject({ peft_type: "LORA", r: 4, lora_alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj", "down_proj"], base_model_name_or_path: base, reins_policy_version: start + 3 })
      expect(statSync(path.join(ckpt, "adapter_model.safetensors")).size).toBeLessThan(baseBytes.length / 2)

      // Train further, then Restore: the saved policy (and version) is back.
      yield* client.train(new TrainRequest({ steps: [[sample]], settings }))
      expect(yield* score()).not.toBeCloseTo(trained, 4)
      const restored = yield* client.restore(new RestoreRequest({ dir: ckpt }))
      expect(restored).toMatchObject({ version: start + 3, optimizer: true })
      expect(yield* score()).toBeCloseTo(trained, 5)

      // A LoRA device serves its own merged weights; it takes no others.
      const weights = yield* client.getWeights
      const refused = yield* Effect.flip(client.setWeights(new DeviceWeights({ version: 99, tensors: weights.tensors })))
      expect(refused.message).toMatch(/SetWeights: this device trains LoRA adapters/)

      // The base directory is untouched; the checkpoint loads as base + merged adapter.
      expect(readFileSync(path.join(base, "model.safetensors")).equals(baseBytes)).toBe(true)
      const merged = yield* loadModelDir(ckpt)
      expect(merged.config.version).toBe(start + 3)
      const served = new Map(weights.tensors.map((t) => [t.name, t.data]))
      for (const [name, w] of Object.entries(merged.weights)) expect(Math.max(...w.map((v, i) => Math.abs(v - served.get(name)![i]!)))).toBeLessThan(1e-6)
      expect(existsSync(path.join(ckpt, "config.json"))).toBe(false)
    }))
})
