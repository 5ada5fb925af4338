/**
 * `npm run bench -- policy --arch ID [--quick] [--threads 1,2] [--layers N]`: a real model's
 * shapes and vocabulary (bench/policy/archs.ts) with random weights, measured through the
 * production code, each figure as a fraction of this machine's bound measured in the same run:
 *
 *   load           config.json + model.safetensors (F32) written, then `loadModel` (one read of
 *                  the file, checksummed by a second thread from the same buffers, each tensor
 *                  transposed straight into the wasm heap, grown once for all of them); bound:
 *                  the file's bytes read once (page cache warm) into fresh memory (its first touch)
 *   prefill        one prompt through the engine, to its first token; bound: the matmul rate at
 *                  the model's shapes over the prompt's rows (FLOPs: `forwardFlops` with causal
 *                  attention, the head over the last row only, as the engine computes it)
 *   decode, 1      one sequence; bound: bandwidth / bytes read per token (every weight, F32,
 *                  and the KV cache)
 *   decode, 16     16 sequences at once (continuous batching); bound: the matmul rate over 16
 *                  rows / `forwardFlops` per token
 *   LoRA train     `attachLora` (rank 8 on q, k, v, o, gate, up, down), `trainStep` with AdamW
 *                  over one micro-batch of rows of 256 tokens; bound: the matmul rate over the
 *                  step's rows / the step's FLOPs per token (`loraTrainFlops`: what training
 *                  with frozen base weights computes — 2 × forward, not 3)
 *   llama.cpp      the anchor: the same weights as an F32 GGUF file, decoded by node-llama-cpp
 *                  (CPU), at each thread count; same bandwidth bound as decode, 1
 *
 * Before any weight is written the production check (`readModelConfig` + `wasmMisfit`, as the
 * device runs it) decides whether the model fits the wasm heap, for serving alone and for LoRA
 * training; rows of what does not fit are reported as not fitting, and the llama.cpp anchor runs
 * regardless. A model whose packed copies would not fit is multiplied in place, its matrices
 * [out, in] as stored (matrixLayout.ts, gemmKernel.ts).
 */
import {
  ChatTemplate,
  decodeHfConfig,
  defaultGemm,
  forwardFlops,
  GenerationConfig,
  type HfModelConfig,
  initAdapters,
  initBackend,
  loadModel,
  makeEngine,
  backendMemory,
  type BackendName,
  memoryNeed,
  microBatchFit,
  type ModelConfig,
  readModelConfig,
  saveModelDir,
  trainBpe,
  wasmMisfit
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import os from "node:os"
import * as path from "node:path"
import { writeReport } from "../report.js"
import { type Arch, benchHfConfig } from "./archs.js"
import { bandwidthBound, benchWeights, kvBytes, LORA, loraTrainFlops, prefillFlops, weightBytes } from "./costs.js"
import { writeGguf } from "./gguf.js"
import { llamaCppDecode } from "./llamaCpp.js"
import { llamaFamilyGguf } from "./llamaGguf.js"
import { type Bandwidth, engineRun, fileReadGbps, firstTouchGbps, measureTrain, memoryBandwidth, modelMatmulRate } from "./measure.js"

const SETTINGS = {
  full: { context: 1024, prefill: 512, prompt: 16, decode1: 64, decode16: 32, trainRows: 4, trainSeq: 256, trainSteps: 2, reps: 2, matmulReps: 5, bandwidthMib: 512, anchorTokens: 64 },
  quick: { context: 256, prefill: 32, prompt: 8, decode1: 8, decode16: 4, trainRows: 1, trainSeq: 256, trainSteps: 1, reps: 1, matmulReps: 2, bandwidthMib: 128, anchorTokens: 8 }
}
type Settings = (typeof SETTINGS)["full"]
const BATCH = 16
const GOAL = 0.5
const GIB = 2 ** 30

export interface ArchOptions {
  readonly arch: Arch
  readonly quick: boolean
  readonly threads: ReadonlyArray<number>
  readonly layers?: number
}

/** Everything measured on the wasm (tfjs) side for a model that fits for serving; training only where it fits too. */
const measureWasm = async (dir: string, c: ModelConfig, s: Settings, trains: boolean) => {
  const file = path.join(dir, "model.safetensors")
  const fileBytes = (await fs.stat(file)).size
  // The bounds first: their products' packed copies are freed before the model takes the heap.
  const trainRows = Math.min(s.trainRows * s.trainSeq, 512)
  const rates = {
    prefill: modelMatmulRate(c, s.prefill, 1, s.matmulReps),
    batch: modelMatmulRate(c, BATCH, BATCH, s.matmulReps),
    train: modelMatmulRate(c, trainRows, trainRows, s.matmulReps)
  }
  // Before the load, while nothing large is garbage (see firstTouchGbps).
  const touch = firstTouchGbps(256, 6)
  const touchGbps = touch.gbps
  let t = performance.now()
  const { model } = await Effect.runPromise(loadModel(dir))
  const loadS = (performance.now() - t) / 1000
  const readGbps = await fileReadGbps(file, 2)
  console.log("bounds", { readGbps, touch, rates: Object.fromEntries(Object.entries(rates).map(([k, r]) => [k, r.gflops])) })
  t = performance.now()
  const gen = await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const engine = yield* makeEngine({ model, stopIds: [], maxBatch: BATCH })
        const engineS = (performance.now() - t) / 1000
        const gemm = defaultGemm(c)
        const v = c.vocabSize
        let prefillS = Infinity, decode1 = 0, decode16 = 0
        // The first run of each is a warm-up (JIT, XNNPACK weight packing, first touch of the caches).
        for (let r = 0; r < s.reps + 1; r++) {
          const p = yield* engineRun(engine, 1, s.prefill, 1, v)
          const one = yield* engineRun(engine, 1, s.prompt, s.decode1, v)
          const many = yield* engineRun(engine, BATCH, s.prompt, s.decode16, v)
          if (r === 0) continue
          prefillS = Math.min(prefillS, p.firstTokenS)
          decode1 = Math.max(decode1, one.decodeTokPerS)
          decode16 = Math.max(decode16, many.decodeTokPerS)
        }
        return { engineS, gemm, prefillTokPerS: s.prefill / prefillS, decode1, decode16 }
      })
    )
  )
  console.log("engine", gen)
  let train: (Awaited<ReturnType<typeof measureTrain>> & { readonly products: "tfjs" | "heap"; readonly microBatchTokens: number }) | undefined
  if (trains) {
    model.attachLora(LORA, initAdapters(c, LORA, 0))
    // Micro-batches as the device packs them: the production fit for this backend's memory.
    const microBatchTokens = microBatchFit(c, backendMemory(tf.getBackend() as BackendName), { seqLen: s.trainSeq, lora: true, inPlace: model.products === "heap" }).tokens
    train = { ...(await measureTrain(model, { rows: s.trainRows, seqLen: s.trainSeq, steps: s.trainSteps, warmup: 1, lr: 1e-4, microBatchTokens })), products: model.products, microBatchTokens }
    console.log("train", train)
  }
  model.dispose()
  return { fileBytes, loadS, readGbps, touchGbps, touchSamples: touch.samples, rates, gen, train }
}

/**
 * The same random weights as an F32 GGUF file and, when the model is to run here, as the Hugging
 * Face model directory (`saveModelDir`). The weights are dropped afterwards.
 */
const writeFiles = async (dir: string, arch: Arch, hf: HfModelConfig, modelDir: boolean) => {
  const c = hf.config
  let t = performance.now()
  const weights = benchWeights(c, 0)
  const initS = (performance.now() - t) / 1000
  t = performance.now()
  const gguf = path.join(dir, "model.gguf")
  const g = llamaFamilyGguf(c, weights, {
    architecture: hf.architecture,
    name: `${arch.title} (random weights)`,
    bosTokenId: hf.bosTokenId ?? 0,
    eosTokenId: hf.eosTokenIds[0] ?? 0,
    preTokenizer: arch.ggufPreTokenizer
  })
  const ggufBytes = await writeGguf(gguf, g.metadata, g.tensors)
  const ggufS = (performance.now() - t) / 1000
  let writeS: number | undefined
  if (modelDir) {
    t = performance.now()
    const tokenizer = trainBpe("the cat sat on the mat. the dog sat on the log. ".repeat(8), { vocabSize: 300 })
    const generationConfig = new GenerationConfig({ eosTokenIds: [...hf.eosTokenIds], temperature: 1, topP: 1, topK: 0, maxNewTokens: 256 })
    await Effect.runPromise(saveModelDir(dir, { config: c, weights, tokenizer, chatTemplate: ChatTemplate.default(), generationConfig, hf }))
    writeS = (performance.now() - t) / 1000
  }
  return { gguf, initS, ggufS, ggufBytes, writeS }
}

export const runArch = async (options: ArchOptions): Promise<void> => {
  const { arch, quick } = options
  const s = quick ? SETTINGS.quick : SETTINGS.full
  const loadBefore = os.loadavg()
  const backend = await initBackend()
  const json = benchHfConfig(arch, { context: s.context, ...(options.layers === undefined ? {} : { layers: options.layers }) })
  const hf = decodeHfConfig(json)
  const c = hf.config
  const need = memoryNeed(c)
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), `reins-bench-${arch.id}-`))
  try {
    // The production check, from config.json alone (as the device runs it before reading weights).
    await fs.writeFile(path.join(dir, "config.json"), JSON.stringify(json, null, 2))
    const checked = await Effect.runPromise(readModelConfig(dir))
    const misfit = backend === "wasm" ? wasmMisfit(checked, { lora: false, serveOnly: true }) : undefined
    const trainMisfit = backend === "wasm" ? wasmMisfit(checked, { lora: true }) : undefined
    console.log(`${arch.title}: ${(need.parameters / 1e6).toFixed(1)}M parameters, backend ${backend}${misfit === undefined ? "" : `; ${misfit}`}${trainMisfit === undefined ? "" : `; LoRA training: ${trainMisfit}`}`)

    const files = await writeFiles(dir, arch, hf, misfit === undefined)
    const { initS, ggufS, ggufBytes, writeS } = files
    console.log("files", { initS, ggufS, ggufBytes, writeS })
    const wasm = misfit === undefined ? await measureWasm(dir, c, s, trainMisfit === undefined) : undefined
    // After the model is gone (the tfjs probe's memory would otherwise be reused by the load).
    const bandwidth = memoryBandwidth(s.bandwidthMib, 3)
    console.log("bandwidth", bandwidth)
    const anchor = await llamaCppDecode(files.gguf, { threads: options.threads, prompt: s.prompt, newTokens: s.anchorTokens, context: s.context, vocab: c.vocabSize, reps: s.reps })
    console.log("llama.cpp", anchor)
    report({ options, s, c, need, misfit, trainMisfit, backend, initS, ggufS, ggufBytes, writeS, bandwidth, wasm, anchor, loadBefore })
  } finally {
    await fs.rm(dir, { recursive: true, force: true })
  }
}

type Measured = Awaited<ReturnType<typeof measureWasm>>

const report = (r: {
  options: ArchOptions; s: Settings; c: ModelConfig; need: ReturnType<typeof memoryNeed>; misfit: string | undefined; trainMisfit: string | undefined; backend: string
  initS: number; ggufS: number; ggufBytes: number; writeS: number | undefined; bandwidth: Bandwidth; wasm: Measured | undefined
  anchor: Awaited<ReturnType<typeof llamaCppDecode>>; loadBefore: Array<number>
}) => {
  const { options, s, c, wasm, anchor } = r
  const gbps = r.bandwidth.gbps
  const { arch } = options
  const ctx1 = s.prompt + s.decode1 / 2
  const ctxAnchor = s.prompt + s.anchorTokens / 2
  const ctx16 = s.prompt + s.decode16 / 2
  const trainTokens = s.trainRows * s.trainSeq
  const fitsNot = (bytes: number) => `does not fit on wasm: needs ${(bytes / GIB).toFixed(1)} GiB`
  const loraBytes = r.need.loraTrainingBytes
  interface Row { readonly label: string; readonly measure: string; readonly unit: string; readonly measured: number | undefined; readonly bound: number; readonly fraction: number; readonly goal: boolean }
  const row = (label: string, measure: string, unit: string, measured: number | undefined, bound: number, goal = true): Row => ({
    label, measure, unit, measured, bound, goal, fraction: measured === undefined ? NaN : unit === "s" ? bound / measured : measured / bound
  })
  const rows: Array<Row> = [
    row("load", `load, loadModel of ${((wasm?.fileBytes ?? 4 * r.need.parameters) / 1e9).toFixed(2)} GB safetensors (F32)`, "s", wasm?.loadS, wasm === undefined ? NaN : wasm.fileBytes / 1e9 * (1 / wasm.readGbps + 1 / wasm.touchGbps)),
    row("prefill", `prefill, ${s.prefill}-token prompt`, "tok/s", wasm?.gen.prefillTokPerS, (wasm?.rates.prefill.gflops ?? NaN) * 1e9 / (prefillFlops(c, s.prefill) / s.prefill)),
    row("decode ×1", "decode, 1 sequence", "tok/s", wasm?.gen.decode1, bandwidthBound(c, gbps, 1, ctx1)),
    row(`decode ×${BATCH}`, `decode, ${BATCH} sequences`, "tok/s", wasm?.gen.decode16, (wasm?.rates.batch.gflops ?? NaN) * 1e9 / forwardFlops(c, 1, ctx16)),
    row("LoRA train", `LoRA train step, ${s.trainRows}×${s.trainSeq} tokens`, "tok/s", wasm?.train === undefined ? undefined : trainTokens / wasm.train.seconds, (wasm?.rates.train.gflops ?? NaN) * 1e9 / (loraTrainFlops(c, trainTokens, s.trainSeq) / trainTokens)),
    ...anchor.runs.map((a) => row(`llama.cpp ×1, ${a.threads}t`, `llama.cpp decode, 1 sequence, ${a.threads} thread(s)`, "tok/s", a.decodeTokPerS, bandwidthBound(c, gbps, 1, ctxAnchor), false))
  ]
  const cell = (v: number) => (Number.isFinite(v) ? v : "—")
  const table = rows.map((x) => [
    x.measure,
    x.measured === undefined ? fitsNot(x.label === "LoRA train" ? loraBytes : r.need.inPlaceServingBytes) : x.measured,
    x.unit,
    cell(x.bound),
    cell(x.fraction),
    x.goal ? `≥ ${GOAL}` : "anchor",
    !x.goal ? "" : x.measured === undefined ? "missed (does not fit)" : x.fraction >= GOAL ? "met" : "missed"
  ])
  const anchorBest = Math.max(...anchor.runs.map((a) => a.decodeTokPerS))
  const name = `policy-${arch.id}${r.options.quick ? "-quick" : ""}${options.layers === undefined ? "" : `-${options.layers}layers`}`
  writeReport({
    name,
    json: {
      arch: arch.id, backend: r.backend, parameters: r.need.parameters, config: arch.hfConfig, bench_context: s.context, layers: c.nLayers, settings: s,
      wasm_misfit: r.misfit ?? null, wasm_lora_training_misfit: r.trainMisfit ?? null, serving_bytes: r.need.inPlaceServingBytes, lora_training_bytes: loraBytes,
      rows: rows.map((x) => ({ ...x, measured: x.measured ?? null, met: x.goal && x.measured !== undefined ? x.fraction >= GOAL : null })),
      files: { init_s: r.initS, gguf_s: r.ggufS, gguf_bytes: r.ggufBytes, safetensors_write_s: r.writeS ?? null },
      bandwidth: r.bandwidth, weight_bytes: weightBytes(c),
      wasm: wasm === undefined ? null : { ...wasm, bandwidth_bound_decode16: bandwidthBound(c, gbps, BATCH, ctx16) },
      llama_cpp: anchor, reins_over_llama_cpp_decode1: wasm === undefined ? null : wasm.gen.decode1 / anchorBest,
      load_average: { before: r.loadBefore, after: os.loadavg() }, goal_fraction: GOAL, quick: r.options.quick
    },
    table: { columns: ["measure", "measured", "unit", "bound", "fraction of bound", "goal", "met"], rows: table },
    chart: {
      title: `${arch.title}: fraction of this machine's bound`,
      unit: "fraction of bound",
      groups: rows.map((x) => ({ label: x.label, bars: [{ series: "measured / bound", value: Number.isFinite(x.fraction) ? x.fraction : 0 }, { series: "goal", value: x.goal ? GOAL : 0 }] }))
    },
    notes: [
      `${arch.title} (${arch.hfConfig["architectures"]}): ${(r.need.parameters / 1e6).toFixed(1)}M parameters, vocab ${c.vocabSize}, ${c.nLayers} layers, random weights in F32; context cut to ${s.context} for the bench. Backend ${r.backend}${r.backend === "wasm" ? " (single-threaded)" : ""}.`,
      ...(r.misfit === undefined ? [] : [`Not run on wasm — the production check says: ${r.misfit}.`]),
      ...(r.misfit !== undefined || r.trainMisfit === undefined ? [] : [`LoRA training not run on wasm — the production check says: ${r.trainMisfit}.`]),
      ...(wasm === undefined ? [] : [`Decoder products: ${wasm.gen.gemm === "heap" ? `in place on the wasm heap over the matrices as the model holds them, [out, in] (gemmKernel.ts: XNNPACK's packed copies of the weights would not fit)${c.tieEmbeddings ? "; the tied head is the embedding table [vocab, d] itself" : ""}` : `${wasm.gen.gemm} (tfjs's matmul)`}.`]),
      `Bounds, measured in this run: read bandwidth ${gbps.toFixed(1)} GB/s (the best of ${Object.entries(r.bandwidth.probes).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")})${wasm === undefined ? "" : `; file read ${wasm.readGbps.toFixed(1)} GB/s into touched memory and first touch of fresh memory ${wasm.touchGbps.toFixed(2)} GB/s (the best of ${wasm.touchSamples.map((g) => g.toFixed(2)).join(", ")}; the load bound: the file's bytes read once into fresh memory); tfjs matmul at the model's shapes ${wasm.rates.prefill.gflops.toFixed(1)} GFLOP/s (prefill rows), ${wasm.rates.batch.gflops.toFixed(1)} (${BATCH} rows), ${wasm.rates.train.gflops.toFixed(1)} (training rows)`}.`,
      `Decode bound, 1 sequence: bandwidth / ${((weightBytes(c) + kvBytes(c, ctx1)) / 1e6).toFixed(0)} MB read per token (the F32 weights, and the KV cache at mean context ${ctx1}). Decode bound, ${BATCH} sequences: matmul rate / forwardFlops per token; bandwidth alone would allow ${bandwidthBound(c, gbps, BATCH, ctx16).toFixed(0)} tok/s.`,
      ...(wasm?.train === undefined ? [] : [`LoRA train step (rank ${LORA.rank}, alpha ${LORA.alpha}, all seven projections): ${s.trainRows} row(s) × ${s.trainSeq} tokens in ${wasm.train.microBatches} micro-batch(es) of at most ${wasm.train.microBatchTokens} tokens (the device's fit for this heap), median of ${s.trainSteps} step(s) after a warm-up; base products ${wasm.train.products === "heap" ? "in place (gemmKernel.ts), the head fused with the log-softmax (headLogprobs.ts)" : "tfjs's matmul"}; ${(loraTrainFlops(c, trainTokens, s.trainSeq) / trainTokens / 1e6).toFixed(0)} MFLOP per token counted as computed with the base frozen: 2 × forward (the forward and every product's input gradient; no weight gradient for a frozen weight), plus attention's backward (one more forward's attention) and 3 × the adapters' forward.`]),
      ...(wasm === undefined ? [] : [`Engine: ${s.prompt}-token prompts, ${s.decode1} (1 sequence) and ${s.decode16} (${BATCH} sequences) sampled tokens, best of ${s.reps} after a warm-up run; decode tok/s counts the tokens after every sequence's first, over the time after it.`]),
      `llama.cpp: node-llama-cpp ${anchor.version} (llama.cpp release ${anchor.llamaCppRelease}, prebuilt CPU binary, gpu: false), the same weights as an F32 GGUF file (${(r.ggufBytes / 1e9).toFixed(2)} GB), loaded in ${anchor.loadS.toFixed(2)} s; ${s.prompt}-token prompt, ${s.anchorTokens} greedy tokens, best of ${s.reps} after a warm-up; prefill ${anchor.runs.map((a) => `${a.prefillTokPerS.toFixed(0)} tok/s at ${a.threads} thread(s)`).join(", ")}.${wasm === undefined ? "" : ` reins decode (1 sequence) / best llama.cpp: ${(wasm.gen.decode1 / anchorBest).toFixed(2)}.`}`,
      `The machine: load average ${r.loadBefore[0]!.toFixed(1)} before and ${os.loadavg()[0]!.toFixed(1)} after, ${os.cpus().length} cores.${r.options.quick ? " QUICK RUN: tiny token counts, a smoke check, not a measurement." : ""}`
    ]
  })
}
