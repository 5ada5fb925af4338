/**
 * `npm run bench -- decode-queue [--quick] [--layers N] [--steps N]`: the CPU's cost of queuing
 * one decoding step on WebGPU, for Qwen3-0.6B's shapes (but a 32k vocabulary), through Dawn on
 * whatever Vulkan device there is (`REINS_BACKEND=webgpu`; on a machine without a GPU, Mesa's
 * lavapipe, which runs the shaders on the CPU). On an H200 this cost was the decoding speed of a
 * decoder made of tfjs ops (47–85 µs each to queue, ~860 per step: bench/gpu), so it is what a
 * decoder has to remove before the device's arithmetic matters. Baseline: the reference decoder
 * of plain tfjs ops (test/policy/reference/tensorDecoder.ts); against it the WebGPU decoder
 * (model/webgpuDecode.ts), in the same run, at 1, 16 and 64 sequences.
 *
 * The vocabulary is 32k because lavapipe binds at most 128 MiB per buffer (Qwen3's 152k-row
 * embedding is 594 MiB); Dawn's Null backend, which runs nothing, caps its memory far below
 * these shapes. A whole step on lavapipe is the CPU computing the model: no GPU's speed.
 */
import { decodeHfConfig, initBackend, type Pick, type TensorKvCache, Transformer, WebGpuDecoder } from "@reins/policy"
import { TensorDecoder } from "../test/policy/reference/tensorDecoder.js"
import { archById, benchHfConfig } from "./policy/archs.js"
import { median } from "./policy/measure.js"
import { writeReport } from "./report.js"

const option = (args: ReadonlyArray<string>, flag: string): string | undefined => {
  const i = args.indexOf(flag)
  return i === -1 ? undefined : args[i + 1]
}

type Decoder = TensorDecoder | WebGpuDecoder

const VOCAB = 32_000

/** Median ms to queue, and to finish, `steps` decoding steps of `batch` sequences (after 2 unmeasured ones). */
const stepMs = async (decoder: Decoder, batch: number, steps: number): Promise<{ readonly queue: number; readonly step: number }> => {
  const caches = Array.from({ length: batch }, () => decoder.kv.tryNewCache(64)!)
  if (caches.some((c) => c === undefined)) throw new Error(`no room for ${batch} caches`)
  const picks: Array<Pick> = caches.map(() => ({ temperature: 1, u: 0.5 }))
  const step = async (ids: (i: number) => Int32Array) => {
    const started = performance.now()
    const rows = decoder.forward(caches.map((cache: TensorKvCache, i) => ({ cache, ids: ids(i) })), picks)
    const queued = performance.now()
    await rows
    return { queue: queued - started, step: performance.now() - started }
  }
  await step((i) => Int32Array.from({ length: 8 }, (_, j) => (i * 13 + j) % 1000))
  const times: Array<{ readonly queue: number; readonly step: number }> = []
  for (let s = 0; s < steps + 2; s++) {
    const t = await step((i) => Int32Array.of((i + s) % 1000))
    if (s >= 2) times.push(t)
  }
  caches.forEach((c) => decoder.kv.releaseCache(c))
  return { queue: median(times.map((t) => t.queue)), step: median(times.map((t) => t.step)) }
}

export default async (args: ReadonlyArray<string>): Promise<void> => {
  const quick = args.includes("--quick")
  const layers = Number(option(args, "--layers") ?? (quick ? 4 : 28))
  const steps = Number(option(args, "--steps") ?? (quick ? 3 : 10))
  if (!(Number.isInteger(layers) && layers > 0 && Number.isInteger(steps) && steps > 0)) throw new Error("--layers and --steps: positive integers")
  const backend = await initBackend("webgpu")
  const adapter = await (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu?.requestAdapter()
  // GPUAdapter.info is newer than the @webgpu/types version tfjs pins
  const info = (adapter as unknown as { info?: { description?: string; vendor?: string } } | null)?.info
  const device = info?.description || info?.vendor || backend
  const arch = archById("qwen3-0.6b")
  // lavapipe binds at most 128 MiB, Qwen3's embedding is 594 MiB
  const config = decodeHfConfig({ ...benchHfConfig(arch, { context: 1024, layers }), vocab_size: VOCAB }).config
  const model = Transformer.init(config, 1)
  const batches = [1, 16, 64]
  // room for 64 caches of 64 tokens
  const options = { kvBytes: layers * 2 * 64 * 64 * config.kvDim * 4, maxSequences: 64 }
  const results: Record<string, Array<{ readonly queue: number; readonly step: number }>> = {}
  for (const [name, make] of [["tfjs-ops", () => new TensorDecoder(model, 0, options)], ["webgpu", () => new WebGpuDecoder(model, 0, options)]] as const) {
    const decoder: Decoder = make()
    try {
      results[name] = []
      for (const b of batches) {
        const ms = await stepMs(decoder, b, steps)
        results[name]!.push(ms)
        console.log(`${name} decoder, ${b} sequence(s): ${ms.queue.toFixed(2)} ms to queue a step, ${ms.step.toFixed(1)} ms to finish it`)
      }
    } finally {
      decoder.dispose()
    }
  }
  model.dispose()
  const tfjsOps = results["tfjs-ops"]!
  const webgpu = results["webgpu"]!
  writeReport({
    name: quick ? "decode-queue-quick" : "decode-queue",
    json: { arch: arch.title, layers, vocab: VOCAB, steps, batches, device, tfjsOps, webgpu },
    table: {
      columns: ["sequences", "tfjs-ops decoder (baseline): queue, ms", "WebGPU decoder: queue, ms", "baseline / WebGPU", "tfjs-ops: whole step, ms", "WebGPU: whole step, ms"],
      rows: batches.map((b, i) => [b, tfjsOps[i]!.queue.toFixed(2), webgpu[i]!.queue.toFixed(2), (tfjsOps[i]!.queue / webgpu[i]!.queue).toFixed(1), tfjsOps[i]!.step.toFixed(1), webgpu[i]!.step.toFixed(1)])
    },
    chart: {
      title: `CPU time to queue one decoding step, ${arch.title} shapes (${layers} layers, vocabulary ${VOCAB})`,
      unit: "ms",
      groups: batches.map((b, i) => ({ label: `×${b}`, bars: [{ series: "tfjs ops (baseline)", value: tfjsOps[i]!.queue }, { series: "webgpu", value: webgpu[i]!.queue }] }))
    },
    notes: [
      `Device: ${device}. Median of ${steps} decoding steps (one token per sequence, tokens drawn on the device) after 2 unmeasured ones, each after an 8-token prompt per sequence.`,
      "Queue: the time forward() takes to record and submit the step's commands and return; whole step: until its tokens are read back. On a CPU's Vulkan (lavapipe) the whole step is the CPU computing the model: no speed of any GPU.",
      "Baseline: the reference device decoder of plain tfjs ops (test/policy/reference/tensorDecoder.ts). Results before 2026-12-05 had the production tensor decoder of then as their baseline, which fused RMSNorm, RoPE, SwiGLU and the KV row writes into one shader each on WebGPU and so queued fewer ops."
    ]
  })
}
