/**
 * `npm run bench -- gpu [--backend webgpu|tensorflow|wasm|cpu] [--reference wasm] [--arch qwen3-0.6b|smollm2-135m|tiny]
 *   [--quick] [--out DIR] [--micro-batch-tokens N] [--submit-batch N]`: the check a GPU machine runs
 *   (bench/gpu/README.md).
 *
 * 1. Correctness (bench/gpu/correctness.ts): a tiny Qwen3 checkpoint gives the same log-probabilities
 *    on the backend under test as on the reference backend (within 1e-3), and one training step the
 *    same loss and close weight updates (their difference within 1% of the update, L2).
 * 2. Speed (bench/gpu/speed.ts): prefill, decoding at 1, 16 and 64 sequences, full and LoRA
 *    training of a real model's shapes, each against the device's matmul or bandwidth bound
 *    measured in the same run (bench/gpu/bounds.ts).
 *
 * Every part that fails is reported with its error and the others still run, so one run on a GPU
 * says everything it can. Writes gpu.json, gpu.md and gpu.svg (`gpu-quick.*` with --quick) into
 * --out (default bench/results/).
 */
import { backendMemory, type BackendName, BACKENDS, initBackend, microBatchFit, parameterCount, takeGpuErrors } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { type BandwidthBound, bandwidthBound, type DispatchCost, dispatchCost, type MatmulBound, matmulBound, warmUp } from "./gpu/bounds.js"
import { type Comparison, compare, compute, referenceInChild, REFERENCE_ENV, runReference, TOLERANCE, writeTinyCheckpoint } from "./gpu/correctness.js"
import { GOAL, measureSpeed, SETTINGS, speedConfig, type SpeedRow } from "./gpu/speed.js"
import { resultsDir, writeReport } from "./report.js"

const flag = (args: ReadonlyArray<string>, name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  if (i < 0) return undefined
  const value = args[i + 1]
  if (value === undefined || value.startsWith("--")) throw new Error(`--${name} needs a value`)
  return value
}

const backendFlag = (args: ReadonlyArray<string>, name: string): BackendName | undefined => {
  const value = flag(args, name)
  if (value !== undefined && !(BACKENDS as ReadonlyArray<string>).includes(value)) throw new Error(`--${name} ${value}: expected one of ${BACKENDS.join(", ")}`)
  return value as BackendName | undefined
}

const message = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0]!

/** The result, or the first line of why there is none (the check's other parts still run). */
const orError = async <A>(f: () => Promise<A>): Promise<A | { readonly error: string }> => {
  try {
    return await f()
  } catch (e) {
    return { error: message(e) }
  }
}

/** What the WebGPU backend knows of its adapter (vendor, architecture), if that is the backend. */
const adapterInfo = (): Record<string, unknown> | null => {
  const info = (tf.backend() as { adapterInfo?: Record<string, unknown> }).adapterInfo
  return info === undefined ? null : { ...info }
}

type Correctness =
  | ({ readonly reference: string; readonly loss: number; readonly referenceLoss: number; readonly decoders: { readonly test: string; readonly reference: string } } & Comparison)
  | { readonly reference: string; readonly error: string }

const checkCorrectness = async (backend: string, reference: BackendName): Promise<Correctness> => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "reins-gpu-check-"))
  try {
    await Effect.runPromise(writeTinyCheckpoint(dir))
    const test = await compute(dir, backend)
    const ref = referenceInChild(dir, reference)
    return { reference, loss: test.loss, referenceLoss: ref.loss, decoders: { test: test.decoder, reference: ref.decoder }, ...compare(test, ref) }
  } catch (e) {
    return { reference, error: message(e) }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

export default async (args: ReadonlyArray<string>): Promise<void> => {
  const job = process.env[REFERENCE_ENV]
  if (job !== undefined) return runReference(job, await initBackend())

  const quick = args.includes("--quick")
  const s = quick ? SETTINGS.quick : SETTINGS.full
  const reference = backendFlag(args, "reference") ?? "wasm"
  const arch = flag(args, "arch") ?? "qwen3-0.6b"
  const out = flag(args, "out") ?? resultsDir
  const backend = await initBackend(backendFlag(args, "backend"))
  // tfjs's WebGPU backend submits its queued work every this many ops (its default: 15)
  const submitBatch = flag(args, "submit-batch")
  if (submitBatch !== undefined) {
    if (!(Number(submitBatch) >= 1) || backend !== "webgpu") throw new Error(`--submit-batch ${submitBatch}: a number of ops ≥ 1, on the webgpu backend`)
    tf.env().set("WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE", Number(submitBatch))
  }
  const gpu = backend === "webgpu" || backend === "tensorflow"
  const { title, config } = speedConfig(arch, s)
  // as the device sizes them: from the backend's memory, for full training (LoRA needs less)
  const microBatchTokens = Number(flag(args, "micro-batch-tokens") ?? microBatchFit(config, backendMemory(backend), { seqLen: s.trainSeq, lora: false }).tokens)
  console.log(`gpu check: backend ${backend}${gpu ? "" : " (no GPU backend: a dry run of the check's logic)"}, reference ${reference}, ${title}`)

  const correctness = await checkCorrectness(backend, reference)
  console.log("correctness", correctness)
  // errors WebGPU reported without throwing, by part: what such a part computed is not to be trusted
  const gpuErrors: GpuErrors = { correctness: takeGpuErrors() ?? null, bounds: null, speed: null }
  const reps = quick ? 1 : 3
  if (gpu && !quick) await warmUp(5)
  const matmul = await orError(() => matmulBound({ gpu, reps: gpu ? 5 : reps, quick }))
  const bandwidth = await orError(() => bandwidthBound({ mib: gpu ? 1024 : quick ? 64 : 256, reps }))
  const dispatch = await orError(() => dispatchCost({ reps }))
  console.log("bounds", { matmul, bandwidth, dispatch })
  gpuErrors.bounds = takeGpuErrors() ?? null
  const noSpeed = (error: string) => ({ misfit: null, rows: [] as ReadonlyArray<SpeedRow>, error })
  const speed = "error" in matmul || "error" in bandwidth
    ? noSpeed(`no bound: ${"error" in matmul ? matmul.error : "error" in bandwidth ? bandwidth.error : ""}`)
    : await measureSpeed({ config, s, backend, matmul, bandwidth, microBatchTokens }).catch((e) => noSpeed(message(e)))
  console.log("speed", speed)
  gpuErrors.speed = takeGpuErrors() ?? null
  if (Object.values(gpuErrors).some((e) => e !== null)) console.log("GPU errors", gpuErrors)
  report({ quick, out, backend, reference, title, config, s, microBatchTokens, submitBatch: submitBatch === undefined ? null : Number(submitBatch), correctness, matmul, bandwidth, dispatch, speed, gpuErrors })
}

/** The errors WebGPU reported without throwing during each part of the check (gpuErrors.ts), or null. */
interface GpuErrors { correctness: string | null; bounds: string | null; speed: string | null }

const report = (r: {
  quick: boolean; out: string; backend: string; reference: string; title: string; config: ReturnType<typeof speedConfig>["config"]; s: (typeof SETTINGS)["full"]
  microBatchTokens: number; submitBatch: number | null; correctness: Correctness; matmul: MatmulBound | { readonly error: string }; bandwidth: BandwidthBound | { readonly error: string }
  dispatch: DispatchCost | { readonly error: string }
  speed: { readonly misfit: string | null; readonly rows: ReadonlyArray<SpeedRow>; readonly error?: string }
  gpuErrors: GpuErrors
}) => {
  const c = r.correctness
  const verdict = (ok: boolean) => (ok ? "met" : "missed")
  const correctnessRows: Array<Array<string | number>> = "error" in c
    ? [["correctness", `failed: ${c.error}`, "", "", "", "missed"]]
    : [
      ["next-token logprobs, max |Δ|", c.logprobMaxAbsDiff, "", TOLERANCE.logprob, "", verdict(c.logprobMaxAbsDiff <= TOLERANCE.logprob)],
      ["next-token distributions, max |Δ|", c.nextMaxAbsDiff, "", TOLERANCE.logprob, "", verdict(c.nextMaxAbsDiff <= TOLERANCE.logprob)],
      ["training step loss, |Δ|", c.lossDiff, "", TOLERANCE.loss, "", verdict(c.lossDiff <= TOLERANCE.loss)],
      ["weight updates, ‖Δ‖ / ‖update‖", c.updateRelDiff, "", TOLERANCE.update, "", verdict(c.updateRelDiff <= TOLERANCE.update)],
      "error" in c.generation
        ? ["engine, greedy tokens", `failed: ${c.generation.error}`, "", "", "", "missed"]
        : ["engine, greedy tokens: same; logprobs max |Δ|", c.generation.sameTokens ? c.generation.logprobMaxAbsDiff : `tokens differ (max |Δ| before: ${c.generation.logprobMaxAbsDiff})`, "", TOLERANCE.logprob, "", verdict(c.generation.sameTokens && c.generation.logprobMaxAbsDiff <= TOLERANCE.logprob)]
    ]
  const errorRows = Object.entries(r.gpuErrors).map(([part, e]) => [`GPU errors reported without throwing, ${part}`, e ?? "none", "", "none", "", e === null ? "met" : "missed"])
  const speedRows = r.speed.rows.map((x) => [
    x.label,
    x.measured ?? `not run: ${x.error}`,
    x.unit,
    x.bound,
    x.fraction ?? "—",
    x.goal === null ? "reported" : x.fraction === null ? "missed" : verdict(x.fraction >= x.goal)
  ])
  const notes = [
    `Backend under test: ${r.backend}; reference: ${r.reference} (in a child process: tfjs backends are per process). Adapter: ${JSON.stringify(adapterInfo())}.`,
    `Correctness: a tiny Qwen3ForCausalLM (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 32, q/k norms, tied head, vocab 320), random weights, written in the Hugging Face layout and loaded by the production loader on each backend; 4 sequences × 48 tokens scored, the whole next-token distribution after each, one AdamW step (lr 1e-3) of SFT on them, and 16 greedy tokens after 12 of each generated together through the engine (decode path: ${"error" in r.correctness ? "—" : `${r.correctness.decoders.test} under test, ${r.correctness.decoders.reference} on the reference`}).`,
    `Speed: ${r.title}, ${(parameterCount(r.config) / 1e6).toFixed(0)}M parameters, random weights in F32, context ${r.s.context}; prompts of ${r.s.prompt} tokens, ${r.s.decode1} (1 sequence) and ${r.s.decodeMany} (batched) sampled tokens, best of ${r.s.reps}${r.s.warmups > 0 ? " after a warm-up" : ", no warm-up"}; training ${r.s.trainRows} × ${r.s.trainSeq} tokens per step in micro-batches of ≤ ${r.microBatchTokens} tokens, median of ${r.s.trainSteps} step(s)${r.s.warmups > 0 ? " after a warm-up" : ""}.${r.speed.misfit === null ? "" : ` Not run: ${r.speed.misfit}.`}${r.speed.error === undefined ? "" : ` Not run: ${r.speed.error}.`}`,
    "error" in r.matmul ? `Matmul bound not measured: ${r.matmul.error}.` : `Matmul bound: fp32 tf.matMul ${r.matmul.gflops.toFixed(1)} GFLOP/s, the best of ${r.matmul.sizes.map((x) => `${x.n}³ ${x.gflops.toFixed(1)}`).join(", ")}${(r.backend === "webgpu" || r.backend === "tensorflow") && !r.quick ? " (measured after 5 s of large products, so the GPU's clocks are up)" : ""}.`,
    "error" in r.bandwidth ? `Bandwidth bound not measured: ${r.bandwidth.error}.` : `Bandwidth bound: ${r.bandwidth.gbps.toFixed(1)} GB/s, the best of tf.add ${r.bandwidth.probes.add.toFixed(1)}, tf.sum ${r.bandwidth.probes.sum.toFixed(1)}${r.bandwidth.probes.copy === undefined ? "" : ` and a WebGPU buffer copy ${r.bandwidth.probes.copy.toFixed(1)}`} over ${r.bandwidth.mib} MiB.`,
    "error" in r.dispatch ? `Dispatch cost not measured: ${r.dispatch.error}.` : `Dispatch: one tiny op read back in ${(r.dispatch.readbackS * 1e3).toFixed(3)} ms; ${(r.dispatch.perOpS * 1e6).toFixed(1)} µs per op queued (a chain of 200 tiny adds read once), ${(r.dispatch.perOpWithUploadS * 1e6).toFixed(1)} µs when each op also uploads a scalar.`,
    `GPU errors: what WebGPU reports as an uncaptured error (an allocation out of memory, a call it rejects) does not throw, and the computation goes on with buffers never made; a part with one is not to be trusted, whatever its figures say.`,
    `Goals: correctness within the tolerances; ≥ ${GOAL} of the matmul bound training and decoding in batches, ≥ ${GOAL} of the bandwidth bound decoding one sequence.${r.quick ? " QUICK RUN: tiny sizes, a smoke check of the logic, not a measurement." : ""}`
  ]
  writeReport({
    name: r.quick ? "gpu-quick" : "gpu",
    json: {
      backend: r.backend, reference: r.reference, adapter: adapterInfo(), model: r.title, parameters: parameterCount(r.config), settings: r.s,
      micro_batch_tokens: r.microBatchTokens, webgpu_submit_batch: r.submitBatch, tolerance: TOLERANCE, goal_fraction: GOAL, correctness: r.correctness,
      bounds: { matmul: r.matmul, bandwidth: r.bandwidth, dispatch: r.dispatch }, speed: r.speed, gpu_errors: r.gpuErrors, quick: r.quick
    },
    table: { columns: ["measure", "measured", "unit", "bound or tolerance", "fraction of bound", "goal"], rows: [...correctnessRows, ...errorRows, ...speedRows] },
    chart: {
      title: `GPU check (${r.backend}): fraction of the device's bound`,
      unit: "fraction of bound",
      groups: r.speed.rows.map((x) => ({ label: x.label, bars: [{ series: "measured / bound", value: x.fraction ?? 0 }, { series: "goal", value: x.goal ?? 0 }] }))
    },
    notes
  }, r.out)
}
