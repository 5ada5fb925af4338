/**
 * `npm run bench -- sim [options]`: predicted throughput of sync, collocated (drain, interrupt)
 * and split schedules for 1–512 devices and longer tails, from a workload profile; validated
 * against the measured small runs when bench/results/sync-vs-async.json has them.
 *
 * Options:
 *   --profile PATH    workload profile JSON (or any JSON with a "profile" key); default: the
 *                     measured file's profile if it has one, else the built-in default estimate
 *   --measured PATH   measured runs for validation (default bench/results/sync-vs-async.json)
 *   --devices LIST    e.g. 1,8,32,128,512 (default)       --tail LIST     e.g. 1,2,4 (default)
 *   --staleness N     max_staleness (default 1)           --seed N        (default 1)
 *   --quick           devices 1,8,32 and tails 1,4
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { resultsDir, writeReport } from "../report.js"
import { lineChartSvg } from "./chart.js"
import { defaultProfile, parseProfile, type WorkloadProfile } from "./profile.js"
import { schedules } from "./schedules.js"
import { defaultSweep, runSweep, type SweepOptions } from "./sweep.js"
import { validateAgainst, type Validation } from "./validate.js"

export { defaultProfile, parseProfile } from "./profile.js"
export { simulate, schedules } from "./schedules.js"
export { runSweep } from "./sweep.js"
export { validateAgainst } from "./validate.js"

const usage = "usage: npm run bench -- sim [--profile PATH] [--measured PATH] [--devices 1,8,32] [--tail 1,2,4] [--staleness N] [--seed N] [--quick]"

const list = (flag: string, v: string | undefined, min: number, integer: boolean): Array<number> => {
  const xs = (v ?? "").split(",").map(Number)
  if (v === undefined || xs.some((x) => !Number.isFinite(x) || x < min || (integer && !Number.isInteger(x))))
    throw new Error(`${flag} expects a comma-separated list of ${integer ? "integers" : "numbers"} >= ${min}, got ${JSON.stringify(v)}\n${usage}`)
  return xs
}

const readJson = (path: string): unknown => {
  try {
    return JSON.parse(readFileSync(path, "utf8"))
  } catch (e) {
    throw new Error(`cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`)
  }
}

interface Args {
  readonly profilePath: string | undefined
  readonly measuredPath: string
  readonly devices: Array<number> | undefined
  readonly tails: Array<number> | undefined
  readonly staleness: number | undefined
  readonly seed: number | undefined
  readonly quick: boolean
}

const parseArgs = (args: ReadonlyArray<string>): Args => {
  let a: Args = { profilePath: undefined, measuredPath: `${resultsDir}sync-vs-async.json`, devices: undefined, tails: undefined, staleness: undefined, seed: undefined, quick: false }
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!, v = args[i + 1]
    const take = () => {
      if (v === undefined) throw new Error(`${flag} needs a value\n${usage}`)
      i++
      return v
    }
    if (flag === "--profile") a = { ...a, profilePath: take() }
    else if (flag === "--measured") a = { ...a, measuredPath: take() }
    else if (flag === "--devices") a = { ...a, devices: list(flag, take(), 1, true) }
    else if (flag === "--tail") a = { ...a, tails: list(flag, take(), 1, false) }
    else if (flag === "--staleness") a = { ...a, staleness: list(flag, take(), 0, true)[0]! }
    else if (flag === "--seed") a = { ...a, seed: list(flag, take(), 0, true)[0]! }
    else if (flag === "--quick") a = { ...a, quick: true }
    else throw new Error(`unknown option ${JSON.stringify(flag)}\n${usage}`)
  }
  return a
}

/** The profile to simulate: --profile, else the measured file's, else the default estimate. */
const loadProfile = (a: Args, measured: unknown): WorkloadProfile => {
  if (a.profilePath !== undefined) {
    const j = readJson(a.profilePath)
    return parseProfile(typeof j === "object" && j !== null && "profile" in j ? (j as { profile: unknown }).profile : j)
  }
  if (typeof measured === "object" && measured !== null && "profile" in measured) {
    try {
      return parseProfile((measured as { profile: unknown }).profile)
    } catch {
      // Reported by the validation; fall back to the default so the sweep still runs.
    }
  }
  return defaultProfile
}

const r3 = (x: number) => Number(x.toPrecision(3))

export const main = async (args: ReadonlyArray<string>): Promise<void> => {
  const started = performance.now()
  const a = parseArgs(args)
  const measured = existsSync(a.measuredPath) ? readJson(a.measuredPath) : undefined
  const profile = loadProfile(a, measured)
  const base = defaultSweep(profile)
  const options: SweepOptions = {
    ...base,
    devices: a.devices ?? (a.quick ? [1, 8, 32] : base.devices),
    tails: a.tails ?? (a.quick ? [1, 4] : base.tails),
    max_staleness: a.staleness ?? base.max_staleness,
    seed: a.seed ?? base.seed
  }
  const { points, ratios } = runSweep(options)
  const validation: Validation =
    measured === undefined
      ? { status: "skipped", reason: `no measured file at ${a.measuredPath} (run npm run bench -- sync-vs-async)` }
      : validateAgainst(
          measured,
          { n: options.n, batch_groups: options.batch_groups_per_device, async_groups: options.async_groups_per_device, max_staleness: options.max_staleness, seed: options.seed, split_train_fraction: options.split_train_fraction, updates: 30, warmup_updates: 2 },
          a.measuredPath
        )
  const elapsed = (performance.now() - started) / 1000

  const rate = (tail: number, D: number, s: string) => points.find((p) => p.tail === tail && p.nominal_devices === D && p.schedule === s)!
  const rows = ratios.map((r) => {
    const split = rate(r.tail, r.devices, "split")
    return [
      r.tail,
      r.devices,
      ...schedules.filter((s) => s !== "split").map((s) => r3(rate(r.tail, r.devices, s).rollouts_per_s_per_device)),
      `${r3(split.rollouts_per_s_per_device)} (${split.devices} dev)`,
      r3(rate(r.tail, r.devices, "collocated-interrupt").rollouts_per_s),
      r3(r.collocated_vs_sync),
      r3(r.collocated_vs_split_per_device)
    ]
  })
  const headline = ratios.find((r) => r.tail === 1 && r.devices === options.devices[0])
  const notes = [
    `Profile: ${profile.source}.`,
    `Predicted by a discrete-event simulation (bench/sim/), not measured. Weak scaling: per device ${options.n} rollouts/group, ${options.batch_groups_per_device} groups per update, ${options.async_groups_per_device} groups running (async), max_staleness ${options.max_staleness}; split trains on ${options.split_train_fraction * 100}% of its devices and runs on 2 where the row says 1.`,
    "Throughput counts rollouts trained per second of wall time between the end of the 2nd update and the end of the last; rates in the schedule columns are per device.",
    "Staleness is bounded as in the real Trainer (StalenessGate): admission (groups admitted < consumed + (max_staleness + 1) × batch_groups) and the gate (an update waits for a still-running group that would otherwise exceed max_staleness; batches take the oldest groups first), so trained staleness never exceeds max_staleness.",
    "Data-parallel assumption: each device runs its own engine (sticky least-loaded routing of rollouts); an update over D devices takes fixed + per_token × tokens / D + allreduce × 2(D−1)/D + allreduce_latency × ⌈log2 D⌉.",
    "The tail knob stretches turns and tool time above their median by the factor (x → m + tail·(x − m)).",
    "Collocated ratios use the better of drain and interrupt at each point.",
    validation.status === "ok"
      ? `Validation against ${validation.source}: ${validation.modes.map((m) => `${m.schedule} ${(m.relative_error * 100).toFixed(1)}% (measured ${r3(m.measured_rollouts_per_s)}, predicted ${r3(m.predicted_rollouts_per_s)} rollouts/s)`).join("; ")}; mean |error| ${(validation.mean_abs_error * 100).toFixed(1)}%.`
      : `Validation skipped: ${validation.reason}.`,
    `Sweep of ${points.length} simulations in ${elapsed.toFixed(1)} s.`
  ]
  writeReport({
    name: "sim",
    json: {
      predicted: true,
      profile,
      sweep: { ...options, profile: undefined },
      headline: headline ?? null,
      ratios,
      points,
      validation,
      elapsed_s: elapsed
    },
    table: {
      columns: ["tail", "devices", "sync /dev", "coll-drain /dev", "coll-interrupt /dev", "split /dev", "coll-interrupt total", "coll / sync", "coll / split per dev"],
      rows
    },
    // writeReport needs a bar chart; the curves below replace its SVG.
    chart: { title: "sim", unit: "rollouts/s per device", groups: [] },
    notes
  })
  // Overwrite the bar chart with the curves: throughput against devices is a line, not bars.
  const xLabels = options.devices.map((d) => (d === 1 ? "1 (split: 2)" : String(d)))
  const curves = options.tails.flatMap((tail) =>
    schedules.map((s) => ({ series: s, tail, values: options.devices.map((d) => rate(tail, d, s).rollouts_per_s_per_device) }))
  )
  const measuredPoints =
    validation.status === "ok" && options.devices[0] === 1
      ? validation.modes.map((m) => ({ series: m.schedule, x: 0, value: m.measured_rollouts_per_s / m.devices }))
      : []
  writeFileSync(
    `${resultsDir}sim.svg`,
    lineChartSvg({ title: "Predicted rollouts trained per second per device (simulation)", unit: "rollouts/s per device", xLabels, curves, points: measuredPoints }) + "\n"
  )
}
