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
 *
 * On WebGPU the engine rows run on its decoder there (model/webgpuDecode.ts's shaders), and again
 * on the reference decoder of plain tfjs ops (test/policy/reference/tensorDecoder.ts; the H200
 * runs of 2026-12-04 measured its production form of then, the tensor decoder, which fused its
 * norms, RoPE and SwiGLU) as the baseline of the same run, labelled "(tfjs-ops decoder,
 * baseline)", without a goal.
 */
import { type DecoderKind, decodeHfConfig, type DeviceDecoderFactory, forwardFlops, initAdapters, makeEngine, type ModelConfig, Transformer, wasmMisfit } from "@reins/policy"
import { Effect, Exit, Scope } from "effect"
import { archById, benchHfConfig } from "../policy/archs.js"
import { bandwidthBound as decodeBound, benchWeights, fullTrainFlops, LORA, loraTrainFlops, prefillFlops } from "../policy/costs.js"
import { type EngineRun, engineRun, measureTrain } from "../policy/measure.js"
import type { BandwidthBound, MatmulBound } from "./bounds.js"
import { TensorDecoder } from "../../test/policy/reference/tensorDecoder.js"
import { checkDecoder, tinyQwen3Config } from "./correctness.js"

export const GOAL = 0.3

export const SETTINGS = {
  full: { context: 1024, prefill: 512, prompt: 16, decode1: 32, decodeMany: 32, trainRows: 4, trainSeq: 256, trainSteps: 2, reps: 2, warmups: 1 },
  // a smoke check of the logic: each row measured once, without a warm-up
  quick: { context: 128, prefill: 32, prompt: 8, decode1: 8, decodeMany: 4, trainRows: 1, trainSeq: 64, trainSteps: 1, reps: 1, warmups: 0 }
}
export type Settings = (typeof SETTINGS)["full"]
export const BATCHES = [16, 64] as const
/** An engine run longer than this is not repeated past the first measured one. */
const SLOW_RUN_MS = 15_000

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

/** A rate, or why it could not be measured. */
interface Measured {
  readonly value: number | null
  readonly error?: string
}

/** Runs `f`, turning a failure into the row's error (the other rows still run). */
const attempt = async (f: () => Promise<number>): Promise<Measured> => {
  try {
    return { value: await f() }
  } catch (e) {
    return { value: null, error: (e as Error).message.split("\n")[0]! }
  }
}

/** Each row as it is measured: a run cut off by a time limit still shows what it got. */
const logged = (label: string, m: Measured): Measured => {
  console.log(`speed: ${label}: ${m.value === null ? `not run: ${m.error}` : `${m.value.toFixed(1)} tok/s`}`)
  return m
}

const ENGINE_ROWS = ["prefill", "decode ×1", ...BATCHES.map((n) => `decode ×${n}`)]
const BASELINE = " (tfjs-ops decoder, baseline)"

/**
 * Prefill and decoding through the engine on `decoder`, by row label plus `suffix` (best of
 * `reps` runs after `warmups` more). If the engine cannot even start on this backend, every engine
 * row carries that error.
 */
const measureEngine = async (model: Transformer, s: Settings, decoder: DecoderKind | DeviceDecoderFactory, suffix = ""): Promise<Map<string, Measured>> => {
  const vocab = model.config.vocabSize
  const out = new Map<string, Measured>()
  const set = (label: string, m: Measured) => out.set(label + suffix, logged(label + suffix, m))
  const scope = Effect.runSync(Scope.make())
  try {
    const engine = await Effect.runPromise(Scope.extend(makeEngine({ model, stopIds: [], maxBatch: Math.max(...BATCHES), decoder }), scope))
    const best = (n: number, prompt: number, newTokens: number, rate: (r: EngineRun) => number) =>
      attempt(async () => {
        let fastest = -Infinity
        for (let r = 0; r < s.warmups + s.reps; r++) {
          const started = performance.now()
          const v = rate(await Effect.runPromise(engineRun(engine, n, prompt, newTokens, vocab)))
          if (r >= s.warmups) fastest = Math.max(fastest, v)
          // A slow backend gets one measured run (after any warm-up), so the check ends in its time.
          if (performance.now() - started > SLOW_RUN_MS && r >= s.warmups) break
        }
        return fastest
      })
    set("prefill", await best(1, s.prefill, 1, (r) => s.prefill / r.firstTokenS))
    set("decode ×1", await best(1, s.prompt, s.decode1, (r) => r.decodeTokPerS))
    for (const n of BATCHES) set(`decode ×${n}`, await best(n, s.prompt, s.decodeMany, (r) => r.decodeTokPerS))
  } catch (e) {
    const error = `the engine did not start: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`
    for (const label of ENGINE_ROWS) out.set(label + suffix, { value: null, error })
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
  return out
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
  const flops = matmul.gflops * 1e9
  const tokens = s.trainRows * s.trainSeq
  // Every row: what bounds it, and the bound in tok/s.
  const specs: ReadonlyArray<Omit<SpeedRow, "measured" | "fraction" | "unit" | "error">> = [
    { label: "prefill", boundOf: "matmul", bound: flops / (prefillFlops(c, s.prefill) / s.prefill), goal: null },
    { label: "decode ×1", boundOf: "bandwidth", bound: decodeBound(c, bandwidth.gbps, 1, s.prompt + s.decode1 / 2), goal: GOAL },
    ...BATCHES.map((n) => ({ label: `decode ×${n}`, boundOf: "matmul" as const, bound: flops / forwardFlops(c, 1, s.prompt + s.decodeMany / 2), goal: GOAL })),
    { label: "full train", boundOf: "matmul", bound: flops / (fullTrainFlops(c, tokens, s.trainSeq) / tokens), goal: GOAL },
    { label: "LoRA train", boundOf: "matmul", bound: flops / (loraTrainFlops(c, tokens, s.trainSeq) / tokens), goal: GOAL }
  ]
  const { decoder } = checkDecoder()
  // the tfjs-ops decoder's engine rows beside the WebGPU decoder's, same bounds, no goal
  const baseline = decoder === "webgpu" ? specs.filter((x) => ENGINE_ROWS.includes(x.label)).map((x) => ({ ...x, label: x.label + BASELINE, goal: null })) : []
  const rows = (measured: (label: string) => Measured): Array<SpeedRow> =>
    [...specs, ...baseline].map((spec) => {
      const m = measured(spec.label)
      return { ...spec, unit: "tok/s", measured: m.value, fraction: m.value === null ? null : m.value / spec.bound, ...(m.error === undefined ? {} : { error: m.error }) }
    })
  if (misfit !== null) return { misfit, rows: rows(() => ({ value: null, error: misfit })) }
  const model = Transformer.fromWeights(c, benchWeights(c, 0))
  try {
    const measured = await measureEngine(model, s, decoder)
    const reference: DeviceDecoderFactory = (m, version, o) => new TensorDecoder(m, version, o)
    if (baseline.length > 0) for (const [label, m] of await measureEngine(model, s, reference, BASELINE)) measured.set(label, m)
    const train = { rows: s.trainRows, seqLen: s.trainSeq, steps: s.trainSteps, warmup: s.warmups, lr: 1e-5, microBatchTokens: options.microBatchTokens }
    measured.set("full train", logged("full train", await attempt(async () => tokens / (await measureTrain(model, train)).seconds)))
    model.attachLora(LORA, initAdapters(c, LORA, 0))
    measured.set("LoRA train", logged("LoRA train", await attempt(async () => tokens / (await measureTrain(model, train)).seconds)))
    return { misfit, rows: rows((label) => measured.get(label)!) }
  } finally {
    model.dispose()
  }
}
