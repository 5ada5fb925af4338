/**
 * `npm run bench -- rollback [--quick] [--reps N] [--out DIR]`: what a Train's rollback point costs on this
 * machine's backend (`REINS_BACKEND`), kept on the device (the tensors the weights and moments
 * had: the device's choice where its memory holds them) against copied out to JavaScript (its
 * choice where it does not, and always before 2026-12-08) — taken before the update, then
 * restored, then let go — for a model trained whole, beside one training step of the same model
 * for scale.
 */
import { AdamW, initBackend, makeConfig, packSequences, parameterCount, trainStep, Transformer } from "@reins/policy"
import { trainingRollback, type RollbackWhere } from "../packages/policy/src/device/rollback.js"
import { DeviceOptimizer } from "../packages/policy/src/device/training.js"
import { median } from "./policy/measure.js"
import { writeReport } from "./report.js"

const option = (args: ReadonlyArray<string>, flag: string): string | undefined => {
  const i = args.indexOf(flag)
  return i === -1 ? undefined : args[i + 1]
}

export default async (args: ReadonlyArray<string>): Promise<void> => {
  const quick = args.includes("--quick")
  const reps = Number(option(args, "--reps") ?? (quick ? 2 : 5))
  if (!(Number.isInteger(reps) && reps >= 1)) throw new Error("--reps: a positive integer")
  const out = option(args, "--out")
  const backend = await initBackend()
  const config = quick
    ? makeConfig({ vocabSize: 1024, dModel: 128, nLayers: 2, nHeads: 4, nKvHeads: 2, headDimension: 32, dFf: 384, contextLength: 128 })
    : makeConfig({ vocabSize: 8192, dModel: 512, nLayers: 6, nHeads: 8, nKvHeads: 4, headDimension: 64, dFf: 1536, contextLength: 256 })
  const model = Transformer.init(config, 1)
  const optimizer = new DeviceOptimizer(model)
  const adam: AdamW = optimizer.configure({ lr: 1e-4, weightDecay: 0 })
  const rows = Array.from({ length: 4 }, (_, r) => ({
    tokens: Int32Array.from({ length: 128 }, (_, i) => (i * 7 + r) % config.vocabSize),
    weights: new Float32Array(128).fill(1 / 512)
  }))
  const batches = packSequences(rows, { maxTokens: 512, maxSeqLen: 128 })
  await trainStep(model, adam, batches, { kind: "sft" }) // the moments exist from here on
  const stepTimes: Array<number> = []
  for (let i = 0; i < reps; i++) stepTimes.push((await trainStep(model, adam, batches, { kind: "sft" })).seconds * 1000)
  const step = median(stepTimes)
  const times: Record<RollbackWhere, { take: Array<number>; undo: Array<number> }> = { host: { take: [], undo: [] }, device: { take: [], undo: [] } }
  for (let i = 0; i < reps; i++) {
    for (const where of ["host", "device"] as const) {
      const started = performance.now()
      const point = await trainingRollback(model, optimizer, where)
      const taken = performance.now()
      point.restore()
      point.dispose()
      await model.param("norm.weight").data() // the restore's work done
      times[where].take.push(taken - started)
      times[where].undo.push(performance.now() - taken)
    }
  }
  optimizer.dispose()
  model.dispose()
  const keptMB = (parameterCount(config) * 4 * 3) / 1024 ** 2
  const result = (where: RollbackWhere) => ({
    take_ms: median(times[where].take),
    take_range_ms: [Math.min(...times[where].take), Math.max(...times[where].take)],
    restore_ms: median(times[where].undo),
    share_of_step: median(times[where].take) / step
  })
  const host = result("host")
  const device = result("device")
  const ms = (x: number) => Number(x.toFixed(x < 10 ? 2 : 0))
  writeReport({
    name: `rollback-${backend}${quick ? "-quick" : ""}`,
    json: { backend, parameters: parameterCount(config), kept_mb: keptMB, reps, step_ms: step, host, device, take_speedup: host.take_ms / device.take_ms },
    table: {
      columns: ["kept", "take ms (median)", "take ms [min–max]", "restore ms", "take ÷ training step"],
      rows: (["host", "device"] as const).map((where) => {
        const r = where === "host" ? host : device
        return [where === "host" ? "copied to the host" : "kept on the device", ms(r.take_ms), `${ms(r.take_range_ms[0]!)}–${ms(r.take_range_ms[1]!)}`, ms(r.restore_ms), `${(r.share_of_step * 100).toFixed(1)}%`]
      })
    },
    chart: {
      title: `Taking a Train's rollback point (${backend}, ${(parameterCount(config) / 1e6).toFixed(1)}M parameters trained whole)`,
      unit: "ms",
      groups: [{ label: "take", bars: [{ series: "host copy", value: host.take_ms }, { series: "on the device", value: device.take_ms }] }]
    },
    notes: [
      `${(parameterCount(config) / 1e6).toFixed(1)}M parameters: the point holds the weights and AdamW's two moments, ${keptMB.toFixed(0)} MB. Median of ${reps} alternating repeats; one SFT step of 4 × 128 tokens takes ${ms(step)} ms (median) for scale.`,
      `Taking the point on the device is ${(host.take_ms / device.take_ms).toFixed(0)}× faster than copying it out, which reads every weight and moment back before each update (on a GPU, across its bus).`
    ]
  }, out)
}
