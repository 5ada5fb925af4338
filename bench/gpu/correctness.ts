/**
 * Part 1 of the GPU check: the backend under test computes what the reference backend computes.
 *
 * One tiny `Qwen3ForCausalLM` checkpoint (random weights, GQA, head_dim ≠ hidden/heads, q/k
 * norms, tied head) is written in the Hugging Face layout and loaded through the production
 * loader on each backend. Each backend then scores the same token sequences (the log-probability
 * of every next token, and the whole next-token distribution after each sequence) and takes one
 * AdamW step of SFT on them. tfjs backends are per process, so the reference runs in a child
 * process (the same command line, told by REINS_GPU_CHECK_REFERENCE what to do). Each also
 * generates greedily through the engine, with its backend's decode path (webgpuDecode.ts's
 * shaders on WebGPU, fastDecode.ts elsewhere; see `checkDecoder`): the same tokens, with the
 * same log-probabilities.
 */
import {
  AdamW,
  ChatTemplate,
  type DecoderKind,
  decodeHfConfig,
  defaultDecoder,
  type DeviceDecoderFactory,
  GenerationConfig,
  generateAll,
  loadModel,
  makeEngine,
  type ModelConfig,
  packSequences,
  parameterShapes,
  Rng,
  saveModelDir,
  scoreSequences,
  trainBpe,
  trainStep,
  type Transformer,
  type Weights
} from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import path from "node:path"
import { TensorDecoder } from "../../test/policy/reference/tensorDecoder.js"

/** Tolerances of the check: the 1e-3 on log-probabilities; the loss alike; updates within 1%. */
export const TOLERANCE = { logprob: 1e-3, loss: 1e-3, update: 1e-2 }

/** A tiny Qwen3 `config.json` as `transformers` writes one. */
export const tinyQwen3Config = (): Record<string, unknown> => ({
  architectures: ["Qwen3ForCausalLM"],
  model_type: "qwen3",
  attention_bias: false,
  bos_token_id: 0,
  eos_token_id: 1,
  head_dim: 32,
  hidden_act: "silu",
  hidden_size: 64,
  intermediate_size: 128,
  max_position_embeddings: 128,
  num_attention_heads: 4,
  num_hidden_layers: 2,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  tie_word_embeddings: true,
  torch_dtype: "float32",
  vocab_size: 320
})

/** Random weights large enough that the distributions are far from uniform (norms near 1). */
const randomWeights = (c: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const out: Weights = {}
  for (const [name, shape] of Object.entries(parameterShapes(c))) {
    const n = shape.reduce((a, b) => a * b, 1)
    const norm = name.endsWith("norm.weight")
    const scale = norm ? 0.1 : 1 / Math.sqrt(shape[shape.length - 1]!)
    out[name] = Float32Array.from({ length: n }, () => (norm ? 1 : 0) + scale * rng.normal())
  }
  return out
}

/** Writes the tiny checkpoint (weights, tokenizer, template, generation config) into `dir`. */
export const writeTinyCheckpoint = (dir: string) =>
  Effect.gen(function* () {
    const hf = decodeHfConfig(tinyQwen3Config())
    const tokenizer = trainBpe("the cat sat on the mat. the dog sat on the log. 12 + 30 = 42. ".repeat(8), { vocabSize: 300 })
    const generationConfig = new GenerationConfig({ eosTokenIds: [...hf.eosTokenIds], temperature: 1, topP: 1, topK: 0, maxNewTokens: 64 })
    yield* saveModelDir(dir, { config: hf.config, weights: randomWeights(hf.config, 3), tokenizer, chatTemplate: ChatTemplate.default(), generationConfig, hf })
  })

/** The same sequences on every backend: 4 × 48 tokens, uniform over the vocabulary. */
const sequences = (vocab: number) => {
  const rng = new Rng(11)
  return Array.from({ length: 4 }, () => {
    const tokens = Int32Array.from({ length: 48 }, () => rng.nextUint32() % vocab)
    return { tokens, weights: new Float32Array(tokens.length).fill(1 / (4 * 47)) }
  })
}

export interface Computed {
  readonly backend: string
  /** log π(tokens[i] | tokens[..i)) of every sequence (index 0 dropped). */
  readonly logprobs: ReadonlyArray<ReadonlyArray<number>>
  /** The whole next-token log-distribution after each sequence. */
  readonly next: ReadonlyArray<ReadonlyArray<number>>
  readonly loss: number
  /** Every weight's change in the step, by name. */
  readonly updates: Readonly<Record<string, ReadonlyArray<number>>>
  /** Greedy continuations of 4 prompts through the engine (batched), or why there are none. */
  readonly generated: { readonly ids: ReadonlyArray<ReadonlyArray<number>>; readonly logprobs: ReadonlyArray<ReadonlyArray<number>> } | { readonly error: string }
  /** The decode path it was generated on (`checkDecoder`). */
  readonly decoder: string
}

/** Whether this process can read a tensor synchronously (WebGPU in Node cannot). */
const readsSync = (): boolean => {
  const t = tf.scalar(0)
  try {
    t.dataSync()
    return true
  } catch {
    return false
  } finally {
    t.dispose()
  }
}

/**
 * The decode path the check generates on: the engine's default on the current backend (WebGPU's
 * shaders, or fastDecode.ts, which reads synchronously, on wasm through views of the heap);
 * where neither can run — the cpu backend with its synchronous reads forbidden, as the tests
 * stand in for WebGPU — the reference device decoder of tfjs ops
 * (test/policy/reference/tensorDecoder.ts), read asynchronously.
 */
export const checkDecoder = (): { readonly name: string; readonly decoder: DecoderKind | DeviceDecoderFactory } => {
  const kind = defaultDecoder()
  if (kind === "webgpu" || tf.getBackend() === "wasm" || readsSync()) return { name: kind, decoder: kind }
  return { name: "reference (tfjs ops)", decoder: (model, version, options) => new TensorDecoder(model, version, options) }
}

/** 16 greedy tokens after each of 4 prompts (the first 12 tokens of each sequence), generated together. */
const generate = (model: Transformer, seqs: ReturnType<typeof sequences>, decoder: DecoderKind | DeviceDecoderFactory): Promise<Computed["generated"]> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const engine = yield* makeEngine({ model, stopIds: [], maxBatch: seqs.length, decoder })
        const params = new SamplingParams({ maxTokens: 16, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0 })
        const outs = yield* Effect.forEach(
          seqs,
          (s, i) => generateAll(engine, new GenerateRequest({ requestId: `check-${i}`, promptIds: s.tokens.slice(0, 12), params })),
          { concurrency: "unbounded" }
        )
        return { ids: outs.map((o) => Array.from(o.outputIds)), logprobs: outs.map((o) => Array.from(o.logprobs)) }
      })
    )
  ).catch((e) => ({ error: (e instanceof Error ? e.message : String(e)).split("\n")[0]! }))

/** The whole next-token distribution after each sequence, from one forward pass. */
const nextDistributions = async (model: Transformer, seqs: ReturnType<typeof sequences>) => {
  const [batch] = packSequences(seqs, { maxTokens: 4096, maxSeqLen: 64, pack: false })
  const logits = model.forward(batch!)
  const rows = tf.logSoftmax(logits)
  const values = (await rows.data()) as Float32Array
  tf.dispose([logits, rows])
  const v = model.config.vocabSize
  // row r's last prediction sits at r · seqLen + (its length − 1)
  return batch!.placements.map((p) => Array.from(values.subarray((p.offset + p.length - 1) * v, (p.offset + p.length) * v)))
}

/** Every trainable weight, read back asynchronously (WebGPU in Node has no synchronous read). */
const readTrainable = async (model: Transformer): Promise<Weights> =>
  Object.fromEntries(await Promise.all([...model.trainable].map(async ([name, v]) => [name, new Float32Array((await v.data()) as Float32Array)] as const)))

/** Everything the check compares, computed on the current backend from the checkpoint in `dir`. */
export const compute = async (dir: string, backend: string): Promise<Computed> => {
  const { model } = await Effect.runPromise(loadModel(dir))
  try {
    const seqs = sequences(model.config.vocabSize)
    const logprobs = (await scoreSequences(model, seqs, { maxTokens: 4096, maxSeqLen: 64 })).map((lp) => Array.from(lp.subarray(1)))
    const next = await nextDistributions(model, seqs)
    const decoder = checkDecoder()
    const generated = await generate(model, seqs, decoder.decoder)
    const before = await readTrainable(model)
    const optimizer = new AdamW(model.trainable, { lr: 1e-3, maxGradNorm: 1 })
    const stats = await trainStep(model, optimizer, packSequences(seqs, { maxTokens: 4096, maxSeqLen: 64 }), { kind: "sft" })
    optimizer.dispose()
    const after = await readTrainable(model)
    const updates = Object.fromEntries(Object.entries(after).map(([name, w]) => [name, Array.from(w, (x, i) => x - before[name]![i]!)]))
    return { backend, logprobs, next, loss: stats.loss, updates, generated, decoder: decoder.name }
  } finally {
    model.dispose()
  }
}

/** What the reference child process is told: the checkpoint and where to write its results. */
export const REFERENCE_ENV = "REINS_GPU_CHECK_REFERENCE"

/** In the child: computes on the reference backend and writes the JSON. */
export const runReference = async (job: string, backend: string) => {
  const { dir, out } = JSON.parse(job) as { dir: string; out: string }
  writeFileSync(out, JSON.stringify(await compute(dir, backend)))
}

/** Runs the reference in a child process of the same command line on `backend`. */
export const referenceInChild = (dir: string, backend: string): Computed => {
  const out = path.join(dir, `reference-${backend}.json`)
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    env: { ...process.env, REINS_BACKEND: backend, [REFERENCE_ENV]: JSON.stringify({ dir, out }) },
    encoding: "utf8",
    timeout: 300_000
  })
  if (child.status !== 0) throw new Error(`the reference (${backend}) failed: ${(child.stderr || child.stdout || String(child.error)).trim().split("\n").slice(-5).join(" | ")}`)
  return JSON.parse(readFileSync(out, "utf8")) as Computed
}

const maxAbsDiff = (a: ReadonlyArray<ReadonlyArray<number>>, b: ReadonlyArray<ReadonlyArray<number>>) =>
  Math.max(...a.map((row, i) => Math.max(...row.map((x, j) => Math.abs(x - b[i]![j]!)))))

export interface Comparison {
  readonly logprobMaxAbsDiff: number
  readonly nextMaxAbsDiff: number
  readonly lossDiff: number
  /**
   * ‖Δ_test − Δ_reference‖ / ‖Δ_reference‖ over every weight (L2). Not the largest single
   * difference: AdamW's first step is nearly lr · sign(gradient), so a weight whose gradient is
   * ~0 may move by ±lr on either backend from rounding alone.
   */
  readonly updateRelDiff: number
  /** Greedy generation: every token the same, and the largest log-probability difference; or why not compared. */
  readonly generation: { readonly sameTokens: boolean; readonly logprobMaxAbsDiff: number } | { readonly error: string }
  readonly met: boolean
}

const compareGenerated = (test: Computed["generated"], reference: Computed["generated"]): Comparison["generation"] => {
  if ("error" in test) return { error: `under test: ${test.error}` }
  if ("error" in reference) return { error: `reference: ${reference.error}` }
  const sameTokens = test.ids.every((ids, i) => ids.length === reference.ids[i]!.length && ids.every((id, j) => id === reference.ids[i]![j]))
  // Compared where both sampled the same token so far (past a first difference the contexts differ).
  let worst = 0
  test.ids.forEach((ids, i) => {
    for (let j = 0; j < ids.length && ids[j] === reference.ids[i]![j]; j++) worst = Math.max(worst, Math.abs(test.logprobs[i]![j]! - reference.logprobs[i]![j]!))
  })
  return { sameTokens, logprobMaxAbsDiff: worst }
}

export const compare = (test: Computed, reference: Computed): Comparison => {
  let diff = 0
  let scale = 0
  for (const [name, r] of Object.entries(reference.updates)) {
    const t = test.updates[name]!
    r.forEach((x, i) => {
      diff += (t[i]! - x) ** 2
      scale += x * x
    })
  }
  const c = {
    logprobMaxAbsDiff: maxAbsDiff(test.logprobs, reference.logprobs),
    nextMaxAbsDiff: maxAbsDiff(test.next, reference.next),
    lossDiff: Math.abs(test.loss - reference.loss),
    updateRelDiff: scale === 0 ? NaN : Math.sqrt(diff / scale),
    generation: compareGenerated(test.generated, reference.generated)
  }
  const generationMet = !("error" in c.generation) && c.generation.sameTokens && c.generation.logprobMaxAbsDiff <= TOLERANCE.logprob
  const met = c.logprobMaxAbsDiff <= TOLERANCE.logprob && c.nextMaxAbsDiff <= TOLERANCE.logprob && c.lossDiff <= TOLERANCE.loss && c.updateRelDiff <= TOLERANCE.update && generationMet
  return { ...c, met }
}
