/**
 * LoRA on the Llama family: an adapted model starts exactly at its base, training changes only
 * the adapters (never a base weight), the server's merged weights decode the same logits as the
 * adapted training forward, the PEFT files follow PEFT's names and layout (checked against the
 * float64 reference with W + (alpha/r)·B·A merged by hand in nn.Linear layout), and gradients of
 * the family's new pieces (q/k norms, biases, shared kv heads, adapters) match finite differences.
 */
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  AdamW,
  decodeSafetensors,
  DecodeWeights,
  FastDecoder,
  initAdapters,
  LoraConfig,
  microBatchGradients,
  packSequences,
  PeftError,
  readPeftAdapter,
  sftLoss,
  trainStep,
  Transformer,
  writePeftAdapter
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { CASES, hfTensors, IDS, load, relError, writeCheckpoint } from "./hf-fixtures.js"
import { referenceLogits } from "./model-fixtures.js"
import { referenceForward, type RefTensors } from "./reference/llamaFamily.js"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "reins-lora-"))
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

const QWEN3 = CASES[3]!
const LLAMA = CASES[0]!

const loadCase = async (c: typeof QWEN3, name: string) => {
  const tensors = hfTensors(c.ref, 11)
  const dir = path.join(tmp, name)
  writeCheckpoint(dir, c, tensors)
  const { hf, weights } = await load(dir)
  return { tensors, hf, weights, model: Transformer.fromWeights(hf.config, weights) }
}

const sftBatch = (tokens: ReadonlyArray<number>) =>
  packSequences([{ tokens: Int32Array.from(tokens), weights: new Float32Array(tokens.length).fill(1) }], { maxTokens: 64, maxSeqLen: 32 })

describe("LoRA adapters", () => {
  it("start at the base exactly; training moves only the adapters and lowers the loss", async () => {
    const { model, weights } = await loadCase(QWEN3, "train")
    try {
      const ids = Int32Array.from(IDS)
      const before = referenceLogits(model, ids)
      const lora = new LoraConfig({ rank: 4, alpha: 8, dropout: 0.1, targets: ["q_proj", "v_proj", "down_proj"] })
      model.attachLora(lora, initAdapters(model.config, lora, 1))
      expect(referenceLogits(model, ids)).toEqual(before) // B = 0
      expect([...model.trainable.keys()].every((n) => n.endsWith(".lora_A") || n.endsWith(".lora_B"))).toBe(true)
      expect(model.trainable.size).toBe(2 * 3 * QWEN3.ref.layers)

      const optimizer = new AdamW(model.trainable, { lr: () => 1e-2, weightDecay: 0 })
      const batch = sftBatch(IDS)
      const losses: Array<number> = []
      for (let i = 0; i < 12; i++) losses.push((await trainStep(model, optimizer, batch, { kind: "sft" })).loss)
      optimizer.dispose()
      expect(losses.at(-1)!).toBeLessThan(losses[0]! * 0.8)
      // Every base weight is bit-for-bit what was loaded; the B matrices moved away from 0.
      const after = model.readWeights()
      for (const [name, w] of Object.entries(weights)) expect(Buffer.from(after[name]!.buffer).equals(Buffer.from(w.buffer)), name).toBe(true)
      const adapters = model.readAdapters()
      expect(Object.entries(adapters).filter(([n]) => n.endsWith(".lora_B")).every(([, b]) => b.some((v) => v !== 0))).toBe(true)

      // The server decodes with the merged weights: the same logits as the adapted forward.
      const snapshot = DecodeWeights.fromModel(model)
      const fast = new FastDecoder(snapshot)
      const cache = fast.newCache(32)
      const served = fast.forward([{ cache, ids }], "all")
      expect(relError(served, chunk(referenceLogits(model, ids), QWEN3.ref.vocab))).toBeLessThan(1e-4)
      expect(relError(served, chunk(before, QWEN3.ref.vocab))).toBeGreaterThan(1e-3) // and not the base's
      fast.freeCache(cache)
      snapshot.dispose()
    } finally {
      model.dispose()
    }
  })

  it("PEFT files: PEFT's tensor names, [r, in] / [out, r] layout, and W + (alpha/r)·B·A is the adapted model", async () => {
    const { model, tensors } = await loadCase(LLAMA, "peft")
    try {
      const lora = new LoraConfig({ rank: 2, alpha: 6, targets: ["q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"] })
      const adapters = initAdapters(model.config, lora, 3)
      for (const [n, v] of Object.entries(adapters)) if (n.endsWith(".lora_B")) v.forEach((_, i, a) => (a[i] = 0.05 * Math.sin(3 * i + n.length)))
      model.attachLora(lora, adapters)
      const dir = path.join(tmp, "adapter")
      await writePeftAdapter(dir, model.config, lora, adapters, { baseModel: "/models/base" })

      const config = JSON.parse(fs.readFileSync(path.join(dir, ADAPTER_CONFIG_FILE), "utf8"))
      expect(config).toMatchObject({ peft_type: "LORA", r: 2, lora_alpha: 6, target_modules: ["q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"], bias: "none", base_model_name_or_path: "/models/base" })
      const file = decodeSafetensors(fs.readFileSync(path.join(dir, ADAPTER_WEIGHTS_FILE)))
      expect(file.tensors.size).toBe(2 * 5 * LLAMA.ref.layers)
      const qA = file.tensors.get("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight")!
      const qB = file.tensors.get("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight")!
      expect(qA.shape).toEqual([2, LLAMA.ref.hidden])
      expect(qB.shape).toEqual([LLAMA.ref.heads * LLAMA.ref.headDim, 2])

      // Merge by PEFT's definition in nn.Linear layout and run the float64 reference on it.
      const merged = new Map([...tensors].map(([n, t]) => [n, { shape: t.shape, values: Float64Array.from(t.values) }]))
      for (const [name, a] of file.tensors) {
        if (!name.endsWith("lora_A.weight")) continue
        const b = file.tensors.get(name.replace("lora_A", "lora_B"))!
        const w = merged.get(name.replace("base_model.model.", "").replace(".lora_A", ""))!
        const [out, inn] = w.shape as [number, number]
        for (let o = 0; o < out; o++) for (let i = 0; i < inn; i++) for (let k = 0; k < 2; k++) w.values[o * inn + i]! += (6 / 2) * (b.data[o * 2 + k] as number) * (a.data[k * inn + i] as number)
      }
      const ref = referenceForward(LLAMA.ref, merged as RefTensors, IDS)
      expect(relError(referenceLogits(model, Int32Array.from(IDS)), ref)).toBeLessThan(1e-4)

      const back = await readPeftAdapter(dir, model.config)
      expect(back.lora).toEqual(lora)
      expect(back.baseModel).toBe("/models/base")
      for (const [n, v] of Object.entries(adapters)) expect([...back.adapters[n]!]).toEqual([...v])
    } finally {
      model.dispose()
    }
  })

  it("refuses PEFT settings it would run differently, naming the key", async () => {
    const { model } = await loadCase(QWEN3, "refuse")
    try {
      const lora = new LoraConfig({ rank: 2, alpha: 2 })
      const dir = path.join(tmp, "refuse-adapter")
      await writePeftAdapter(dir, model.config, lora, initAdapters(model.config, lora, 0))
      const good = fs.readFileSync(path.join(dir, ADAPTER_CONFIG_FILE), "utf8")
      for (const [over, message] of [
        [{ use_dora: true }, /use_dora: true is not supported/],
        [{ use_rslora: true }, /use_rslora: true/],
        [{ rank_pattern: { "model.layers.0.self_attn.q_proj": 8 } }, /rank_pattern/],
        [{ target_modules: ["q_proj", "lm_head"] }, /target_modules: \["q_proj","lm_head"\]/],
        [{ bias: "all" }, /bias: "all"/]
      ] as const) {
        fs.writeFileSync(path.join(dir, ADAPTER_CONFIG_FILE), JSON.stringify({ ...JSON.parse(good), ...over }))
        await expect(readPeftAdapter(dir, model.config)).rejects.toThrow(PeftError)
        await expect(readPeftAdapter(dir, model.config)).rejects.toThrow(message)
      }
      fs.writeFileSync(path.join(dir, ADAPTER_CONFIG_FILE), good)
      fs.rmSync(path.join(dir, ADAPTER_WEIGHTS_FILE))
      await expect(readPeftAdapter(dir, model.config)).rejects.toThrow(/adapter_model\.safetensors: missing/)
    } finally {
      model.dispose()
    }
  })
})

describe("gradients of the Llama family's pieces", () => {
  it("q/k norms, q/k/v/o biases, shared kv heads and adapters match central finite differences", async () => {
    const [batch] = sftBatch(IDS)
    // The loss alone, as microBatchGradients computes it (log-probabilities in training mode, the SFT loss).
    const loss = (model: Transformer) => () =>
      tf.tidy(() => {
        const out = sftLoss(model.tokenLogprobs(batch!, batch!.targets, { training: true }), batch!)
        out.entropy.dispose()
        return out.loss.dataSync()[0]!
      })
    const check = async (model: Transformer, names: ReadonlyArray<string>) => {
      const g = (await microBatchGradients(model, batch!, { kind: "sft" })).grads
      for (const name of names) checkFiniteDifference(model, name, g.get(name)!, loss(model))
      for (const t of g.values()) t.dispose()
    }
    const qwen3 = (await loadCase(QWEN3, "grads-qwen3")).model
    const llama = (await loadCase(LLAMA, "grads-llama")).model
    try {
      // Qwen3's head is tied (the embedding's gradient comes from the lookup and the head), Llama's is not.
      await check(qwen3, ["layers.0.attn.q_norm.weight", "layers.1.attn.k_norm.weight", "layers.0.attn.wv", "tok_embeddings.weight"])
      await check(llama, ["layers.0.attn.bk", "layers.1.attn.bo", "layers.0.attn.wk", "layers.1.attn.bq", "lm_head.weight"])
      // With adapters the base is frozen: its products compute input gradients only.
      const lora = new LoraConfig({ rank: 2, alpha: 4, targets: ["k_proj", "up_proj", "down_proj"] })
      for (const model of [llama, qwen3]) {
        const adapters = initAdapters(model.config, lora, 5)
        for (const [n, v] of Object.entries(adapters)) if (n.endsWith(".lora_B")) v.fill(0.03)
        model.attachLora(lora, adapters)
        await check(model, ["layers.0.mlp.w3.lora_A", "layers.1.attn.wk.lora_B", "layers.0.mlp.w2.lora_A"])
      }
    } finally {
      qwen3.dispose()
      llama.dispose()
    }
  })
})

/** d loss / d θ_i at a few entries of `name`, by (f(θ + ε) − f(θ − ε)) / 2ε, against `grad`. */
const checkFiniteDifference = (model: Transformer, name: string, grad: tf.Tensor, loss: () => number) => {
  const v = model.trainable.get(name)!
  const values = new Float32Array(v.dataSync() as Float32Array)
  const g = grad.dataSync()
  const eps = 1e-2
  for (const i of [0, Math.floor(values.length / 2), values.length - 1]) {
    const at = (delta: number) => {
      const w = new Float32Array(values)
      w[i]! += delta
      v.assign(tf.tensor(w, v.shape))
      return loss()
    }
    const numeric = (at(eps) - at(-eps)) / (2 * eps)
    expect(Math.abs(numeric - g[i]!), `${name}[${i}]: analytic ${g[i]} vs numeric ${numeric}`).toBeLessThan(2e-3 + 0.02 * Math.abs(numeric))
  }
  v.assign(tf.tensor(values, v.shape))
}

const chunk = (flat: Float32Array, vocab: number): Array<Array<number>> =>
  Array.from({ length: flat.length / vocab }, (_, i) => [...flat.subarray(i * vocab, (i + 1) * vocab)])
