/**
 * `npm run bench -- micro-batch [--quick] [--sizes 1024,2048,...]`: how a training step's speed
 * depends on the micro-batch size on this machine's backend, for the mini-swe policy's shape
 * (768-token vocabulary, d 128, 2 layers, context 640) and 64 sequences of 300–600 tokens. The
 * baseline is the size the device picks by itself (`microBatchFit`: memory, and on wasm/CPUs a
 * cap of 4096 because larger is no faster) against the fastest size measured in the same run.
 */
import { AdamW, backendMemory, initBackend, makeConfig, microBatchFit, packSequences, trainStep, Transformer } from "@reins/policy"
import { median } from "./policy/measure.js"
import { writeReport } from "./report.js"

const option = (args: ReadonlyArray<string>, flag: string): string | undefined => {
  const i = args.indexOf(flag)
  return i === -1 ? undefined : args[i + 1]
}

export default async (args: ReadonlyArray<string>): Promise<void> => {
  const quick = args.includes("--quick")
  const sizes = (option(args, "--sizes") ?? (quick ? "2048,4096,16384" : "1024,2048,4096,8192,16384,40960")).split(",").map(Number)
  if (sizes.some((n) => !(Number.isInteger(n) && n >= 640))) throw new Error("--sizes: comma-separated integers ≥ 640 (one row of the context)")
  const steps = quick ? 2 : 3
  const backend = await initBackend()
  const config = makeConfig({ vocabSize: 768, dModel: 128, nLayers: 2, nHeads: 4, dFf: 352, contextLength: 640 })
  const auto = microBatchFit(config, backendMemory(backend), { seqLen: 640, lora: false })
  const model = Transformer.init(config, 1)
  const sequences = Array.from({ length: 64 }, (_, r) => {
    const n = 300 + ((r * 37) % 300)
    return { tokens: Int32Array.from({ length: n }, (_, i) => (i * 7 + r) % 768), weights: new Float32Array(n).fill(1e-4) }
  })
  const tokens = sequences.reduce((n, s) => n + s.tokens.length - 1, 0)
  const rows: Array<{ size: number; microBatches: number; seconds: number; times: Array<number> }> = []
  for (const size of [...new Set([...sizes, auto.tokens])].sort((a, b) => a - b)) {
    const batches = packSequences(sequences, { maxTokens: size, maxSeqLen: 640 })
    const optimizer = new AdamW(model.trainable, { lr: 1e-6 })
    try {
      await trainStep(model, optimizer, batches, { kind: "sft" }) // warm-up
      const times: Array<number> = []
      for (let i = 0; i < steps; i++) times.push((await trainStep(model, optimizer, batches, { kind: "sft" })).seconds)
      rows.push({ size, microBatches: batches.length, seconds: median(times), times })
      console.log(`${size} tokens: ${batches.length} micro-batches, ${times.map((t) => t.toFixed(2)).join(" ")} s`)
    } finally {
      optimizer.dispose()
    }
  }
  model.dispose()
  const fastest = rows.reduce((a, b) => (b.seconds < a.seconds ? b : a))
  const chosen = rows.find((r) => r.size === auto.tokens)!
  writeReport({
    name: quick ? "micro-batch-quick" : "micro-batch",
    json: { backend, tokens_per_step: tokens, steps, chosen: { ...auto, seconds: chosen.seconds }, fastest, rows, chosen_over_fastest: chosen.seconds / fastest.seconds },
    table: {
      columns: ["micro-batch tokens", "micro-batches", "step s (median)", "tok/s", "vs fastest"],
      rows: rows.map((r) => [`${r.size}${r.size === auto.tokens ? " (device's own)" : ""}`, r.microBatches, r.seconds, Math.round(tokens / r.seconds), `${(r.seconds / fastest.seconds).toFixed(2)}×`])
    },
    chart: {
      title: `Training step by micro-batch size (${backend}, ${tokens} tokens per step)`,
      unit: "tok/s",
      groups: rows.map((r) => ({ label: String(r.size), bars: [{ series: "tok/s", value: tokens / r.seconds }] }))
    },
    notes: [
      `The device's own size: ${auto.tokens} tokens (bound by ${auto.boundBy}); its step takes ${(chosen.seconds / fastest.seconds).toFixed(2)}× the fastest size's (${fastest.size}).`,
      `Median of ${steps} steps after a warm-up; the losses are weighted sums, so every size computes the same update.`
    ]
  })
}
