/**
 * Hugging Face model directories in and out: a Qwen2-layout checkpoint (BF16, sharded, no
 * generation_config.json) loads as a model directory, saves back in its own layout and dtype,
 * and `reins export` writes Hugging Face directories — a converted dtype, one of reins's own
 * Llama-shaped models, and a LoRA checkpoint merged into its base — with clear errors for what
 * it cannot export.
 */
import {
  ChatTemplate,
  decodeSafetensors,
  initAdapters,
  initModelDir,
  loadModelDir,
  LoraConfig,
  makeConfig,
  saveChatTemplate,
  saveModelDir,
  saveTokenizer,
  trainBpe,
  writePeftAdapter
} from "@reins/policy"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { CASES, hfTensors, writeCheckpoint } from "../policy/hf-fixtures.js"
import { killReinsChildren, spawnReins } from "../reinsCli.js"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "reins-export-"))
afterAll(() => {
  killReinsChildren()
  fs.rmSync(tmp, { recursive: true, force: true })
})

const tokenizer = trainBpe("the cat sat on the mat. <|im_start|>user\nhello<|im_end|>\n".repeat(4), { vocabSize: 270 })
const QWEN2 = CASES[2]! // BF16, tied, q/k/v biases

/** A Hugging Face Qwen2 directory: 3 shards, tokenizer + template files, no generation_config.json. */
const hfDir = async (name: string) => {
  const dir = path.join(tmp, name)
  const tensors = hfTensors({ ...QWEN2.ref, vocab: 300 }, 5)
  writeCheckpoint(dir, { ...QWEN2, config: { ...QWEN2.config, vocab_size: 300 } }, tensors, 3)
  await Effect.runPromise(Effect.zipRight(saveTokenizer(dir, tokenizer), saveChatTemplate(dir, ChatTemplate.default())))
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ tokenizer_class: "Qwen2Tokenizer", eos_token: "<|im_end|>" }))
  return { dir, tensors }
}

const exportCli = async (args: ReadonlyArray<string>) => {
  const child = spawnReins(["export", ...args])
  const code = await child.exited
  return { code, output: child.output() }
}

describe("Hugging Face model directories", () => {
  it("load (shards, BF16, eos from config.json) and save back in their own layout and dtype", async () => {
    const { dir, tensors } = await hfDir("qwen2")
    const loaded = await Effect.runPromise(loadModelDir(dir))
    expect(loaded.hf?.architecture).toBe("Qwen2ForCausalLM")
    expect(loaded.config).toMatchObject({ nKvHeads: 2, qkvBias: true, oBias: false, tieEmbeddings: true })
    expect([...loaded.generationConfig.eosTokenIds]).toEqual([2, 3])
    const out = path.join(tmp, "qwen2-saved")
    await Effect.runPromise(saveModelDir(out, { ...loaded, config: loaded.config.withVersion(7) }))
    const config = JSON.parse(fs.readFileSync(path.join(out, "config.json"), "utf8"))
    expect(config).toMatchObject({ architectures: ["Qwen2ForCausalLM"], torch_dtype: "bfloat16", hidden_size: 32, num_key_value_heads: 2, reins_policy_version: 7, use_sliding_window: false })
    const file = decodeSafetensors(fs.readFileSync(path.join(out, "model.safetensors")))
    expect([...file.tensors.keys()].sort()).toEqual([...tensors.keys()].sort())
    expect(file.tensors.get("model.layers.0.self_attn.q_proj.weight")).toMatchObject({ dtype: "BF16", shape: [32, 32] })
    const back = await Effect.runPromise(loadModelDir(out))
    expect(back.config.version).toBe(7)
    for (const [name, w] of Object.entries(loaded.weights)) expect([...back.weights[name]!]).toEqual([...w])
  })
})

describe("reins export", () => {
  it("converts the dtype of a Hugging Face directory and keeps its tokenizer files", async () => {
    const { dir } = await hfDir("to-f32")
    const out = path.join(tmp, "to-f32-out")
    const { code, output } = await exportCli(["--model", dir, "--out", out, "--dtype", "f32"])
    expect(output).toMatch(/wrote Qwen2ForCausalLM \(float32, policy version 0\)/)
    expect(code).toBe(0)
    expect(JSON.parse(fs.readFileSync(path.join(out, "config.json"), "utf8")).torch_dtype).toBe("float32")
    expect(decodeSafetensors(fs.readFileSync(path.join(out, "model.safetensors"))).tensors.get("model.norm.weight")!.dtype).toBe("F32")
    expect(fs.readdirSync(out).sort()).toEqual(["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"])
  }, 120_000)

  it("writes a LoRA checkpoint merged into its base; refuses what it cannot export", async () => {
    const base = path.join(tmp, "own-base")
    const config = makeConfig({ vocabSize: tokenizer.vocabSize, dModel: 32, nLayers: 2, nHeads: 4, nKvHeads: 2, dFf: 48, contextLength: 64, tieEmbeddings: false })
    await Effect.runPromise(initModelDir(base, { tokenizer, config, seed: 1 }))
    const lora = new LoraConfig({ rank: 2, alpha: 4, targets: ["q_proj", "down_proj"] })
    const adapters = initAdapters(config, lora, 2)
    for (const [n, v] of Object.entries(adapters)) if (n.endsWith("lora_B")) v.fill(0.25)
    const adapterDir = path.join(tmp, "adapter")
    await writePeftAdapter(adapterDir, config, lora, adapters, { baseModel: base, version: 4 })

    const refused = await exportCli(["--model", adapterDir, "--out", path.join(tmp, "no")])
    expect(refused.code).toBe(1)
    expect(refused.output).toMatch(/is a LoRA adapter .*pass --merge-lora/)

    const out = path.join(tmp, "merged")
    const { code, output } = await exportCli(["--model", adapterDir, "--out", out, "--merge-lora", "--dtype", "bf16"])
    expect(output).toMatch(/wrote LlamaForCausalLM \(bfloat16, policy version 4\)/)
    expect(code).toBe(0)
    const merged = await Effect.runPromise(loadModelDir(out))
    const baseWeights = (await Effect.runPromise(loadModelDir(base))).weights
    const q = "layers.1.attn.wq"
    // W + (4/2)·A·B: every entry moved by the adapter (up to bf16 rounding), untouched ones equal.
    const diff = merged.weights[q]!.map((v, i) => v - baseWeights[q]![i]!)
    expect(Math.max(...diff.map(Math.abs))).toBeGreaterThan(0.05)
    expect(Math.max(...merged.weights["layers.0.attn.wk"]!.map((v, i) => Math.abs(v - baseWeights["layers.0.attn.wk"]![i]!)))).toBeLessThan(0.01)

    const notEmpty = await exportCli(["--model", base, "--out", out])
    expect(notEmpty.output).toMatch(/--out .* exists and is not empty/)

    // A broken adapter_config.json is a one-line error naming the file, not a stack trace.
    const broken = path.join(tmp, "broken-adapter")
    fs.cpSync(adapterDir, broken, { recursive: true })
    fs.writeFileSync(path.join(broken, "adapter_config.json"), "{ not json")
    const bad = await exportCli(["--model", broken, "--out", path.join(tmp, "never"), "--merge-lora"])
    expect(bad.code).toBe(1)
    expect(bad.output).toMatch(/reins export: .*adapter_config\.json/)
    expect(bad.output).not.toMatch(/\n\s+at /)
    expect(fs.existsSync(path.join(tmp, "never", "model.safetensors"))).toBe(false)
  }, 300_000) // five CLI processes, each ~3 s to start here and much more on a loaded machine
})
