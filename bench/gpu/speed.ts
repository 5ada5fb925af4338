/**
 * Part 2 of the GPU check: a real model's shapes (Qwen3-0.6B by default, random weights) through
 * the production engine and training step on the backend under test, each rate against the
 * device's bound measured in the same run (bounds.ts):
 *
 *   prefill        one prompt to its first token; bound: matmul FLOP/s / prefill FLOPs per token
 *   decode ×1      one sequence; bound: bandwidth / bytes read per token (weights and KV cache)
 *   decode ×16/×64 continuous batching; bound: matmul FLOP/s / forward FLOPs per token
 *   full train     AdamW step over every weight; bound: matmul FLOP/s / (3 × forward) per token
 *   LoRA train     rank 8 on the seven projections; bound: matmul FLOP/s / LoRA step FLOPs per token
 *
 * Goals (the issue's): ≥ 30% of the matmul bound in training and batched decoding, ≥ 30% of the
 * bandwidth bound decoding one sequence. Prefill is reported without a goal.
 */
import { decodeHfConfig, forwardFlops, initAdapters, makeEngine, type ModelConfig, Transformer, wasmMisfit } from "@reins/policy"
import { Effect, Exit, Scope } from "effect"
import { archById, benchHfConfig } from "../policy/archs.js"
import { bandwidthBound as decodeBound, benchWeights, fullTrainFlops, LORA, loraTrainFlops, prefillFlops } from "../policy/costs.js"
import { type EngineRun, engineRun, measureTrain } from "../policy/measure.js"
import type { BandwidthBound, MatmulBound } from "./bounds.js"
import { tinyQwen3Config } from "./correctness.js"

export const GOAL = 0.3

export const SETTINGS = {
  full: { context: 1024, prefill: 512, prompt: 16, decode1: 64, decodeMany: 32, trainRows: 4, trainSeq: 256, trainSteps: 2, reps: 2 },
  quick: { context: 128, prefill: 32, prompt: 8, decode1: 8, decodeMany: 4, trainRows: 1, trainSeq: 64, trainSteps: 1, reps: 1 }
}
export type Settings = (typeof SETTINGS)["full"]
export const BATCHES = [16, 64] as const

/** `tiny`: the correctness check's Qwen3; otherwise an arch of the policy bench at the check's context. */
export const speedConfig = (arch: string, s: Settings): { readonly title: string; readonly config: ModelConfig } =>
  arch === "tiny"
    ? { title: "tiny Qwen3 (correctness checkpoint's shapes)", config: decodeHfConfig({ ...tinyQwen3Config(), max_position_embeddings: s.context }).config }
    : { title: archById(arch).title, config: decodeHfConfig(benchHfConfig(archById(arch), { context: s.context })).config }

export interface SpeedRow {
  readonly label: string
  readonly measured: number | null
  readonly bound: number
  readonly unit: "tok/s"
  readonly boundOf: "matmul" | "bandwidth"
  readonly fraction: number | null
  readonly goal: number | null
  readonly error?: string
}

/** Runs `f`, turning a failure into the row's error (the other rows still run). */
const attempt = async (f: () => Promise<number>): Promise<{ value: number | null; error?: string }> => {
  try {
    return { value: await f() }
  } catch (e) {
    return { value: null, error: (e as Error).message.split("\n")[0]! }
  }
}

export const measureSpeed = async (options: {
  readonly config: ModelConfig
  readonly s: Settings
  readonly backend: string
  readonly matmul: MatmulBound
  readonly bandwidth: BandwidthBound
  readonly microBatchTokens: number
}): Promise<{ readonly rows: ReadonlyArray<SpeedRow>; readonly misfit: string | null }> => {
  const { config: c, s, matmul, bandwidth } = options
  const misfit = options.backend === "wasm" ? wasmMisfit(c, { lora: false }) ?? null : null
  const flopsBound = matmul.gflops * 1e9
  const ctx1 = s.prompt + s.decode1 / 2
  const ctxMany = s.prompt + s.decodeMany / 2
  const tokens = s.trainRows * s.trainSeq
  const row = (label: string, boundOf: SpeedRow["boundOf"], bound: number, goal: number | null, r: { value: number | null; error?: string }): SpeedRow => ({
    label,
    measured: r.value,
    bound,
    unit: "tok/s",
    boundOf,
    fraction: r.value === null ? null : r.value / bound,
    goal,
    ...(r.error === undefined ? {} : { error: r.error })
  })
  const bounds = {
    prefill: flopsBound / (prefillFlops(c, s.prefill) / s.prefill),
    decode1: decodeBound(c, bandwidth.gbps, 1, ctx1),
    decodeMany: flopsBound / forwardFlops(c, 1, ctxMany),
    full: flopsBound / (fullTrainFlops(c, tokens, s.trainSeq) / tokens),
    lora: flopsBound / (loraTrainFlops(c, tokens, s.trainSeq) / tokens)
  }
  if (misfit !== null) {
    const no = { value: null, error: misfit }
    return {
      misfit,
      rows: [
        row("prefill", "matmul", bounds.prefill, null, no),
        row("decode ×1", "bandwidth", bounds.decode1, GOAL, no),
        ...BATCHES.map((n) => row(`decode ×${n}`, "matmul", bounds.decodeMany, GOAL, no)),
        row("full train", "matmul", bounds.full, GOAL, no),
        row("LoRA train", "matmul", bounds.lora, GOAL, no)
      ]
    }
  }
  const model = Transformer.fromWeights(c, benchWeights(c, 0))
  try {
    const scope = Effect.runSync(Scope.make())
    const engine = await Effect.runPromise(Scope.extend(makeEngine({ model, stopIds: [], maxBatch: Math.max(...BATCHES) }), scope))
    /** The best of `reps` runs after a warm-up run (compilation, first touch of the caches). */
    const best = (n: number, prompt: number, newTokens: number, rate: (r: EngineRun) => number) =>
      attempt(async () => {
        let out = -Infinity
        for (let r = 0; r <= s.reps; r++) {
          const v = rate(await Effect.runPromise(engineRun(engine, n, prompt, newTokens, c.vocabSize)))
          if (r > 0) out = Math.max(out, v)
        }
        return out
      })
    const engineRows: Array<SpeedRow> = []
    try {
      engineRows.push(row("prefill", "matmul", bounds.prefill, null, await best(1, s.prefill, 1, (r) => s.prefill / r.firstTokenS)))
      engineRows.push(row("decode ×1", "bandwidth", bounds.decode1, GOAL, await best(1, s.prompt, s.decode1, (r) => r.decodeTokPerS)))
      for (const n of BATCHES) engineRows.push(row(`decode ×${n}`, "matmul", bounds.decodeMany, GOAL, await best(n, s.prompt, s.decodeMany, (r) => r.decodeTokPerS)))
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
    const train = { rows: s.trainRows, seqLen: s.trainSeq, steps: s.trainSteps, warmup: 1, lr: 1e-5, microBatchTokens: options.microBatchTokens }
    const full = await attempt(async () => tokens / (await measureTrain(model, train)).seconds)
    model.attachLora(LORA, initAdapters(c, LORA, 0))
    const lora = await attempt(async () => tokens / (await measureTrain(model, train)).seconds)
    return { misfit, rows: [...engineRows, row("full train", "matmul", bounds.full, GOAL, full), row("LoRA train", "matmul", bounds.lora, GOAL, lora)] }
  } finally {
    model.dispose()
  }
}
