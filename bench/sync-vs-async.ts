/**
 * `npm run bench -- sync-vs-async [options]` (also `npx reins bench sync-vs-async -- [options]`):
 * the sync, collocated async (drain and interrupt) and split async schedules side by side on the
 * same workload — same base checkpoint, task order, seeds, batch, number of updates and learning
 * settings — with real harness processes and the real Gateway, Controller and Trainer.
 * See bench/syncVsAsync/README.md for the method and the figures.
 *
 *   --harness calc|mini-swe   the workload (default calc)
 *   --model DIR|fresh         base checkpoint (default examples/H/base, else a cached quick SFT base)
 *   --updates N               updates per mode (default 4; --quick 2; --full 12)
 *   --groups G                task groups per update (default 2; --full 4)
 *   --n N                     rollouts per group (default 4; --full 8)
 *   --async-groups A          groups kept running by the async modes (default 2 × G)
 *   --max-staleness S         staleness bound of the async modes (default 2, the Trainer's default)
 *   --tail X                  slow tasks (a quarter, the same in every mode) take X times as long (default 1):
 *                             their harness process stays (X − 1) × --tail-unit seconds longer
 *   --tail-unit S             the harness's uncontended rollout time (default: measured here, per harness)
 *   --nice N                  niceness of the harness and verifier processes (default 19; 0 = none)
 *   --reward shaped|exact     calc: partial credit for near answers on top of the 0/1 verifier
 *                             (default shaped, so a weak base has reward variance); pass@1 is exact
 *   --repeats R               repeats of every mode, interleaved (default 2; --quick 1; --full 3)
 *   --eval-tasks K            held-out tasks for the final pass@1, first repeat (default 8; --quick 0; --full 40)
 *   --eval-samples S          samples per held-out task (default 2; --full 4)
 *   --lr X                    learning rate (default 2e-4)      --seed N   task order and sampling (default 1)
 *   --timeout S               per-mode limit in seconds (default 300; --full 1800)
 *   --modes LIST              a subset, e.g. sync,split (the ratios need all four)
 *   --out DIR                 where the results go (default bench/results/)
 *   --quick | --full          scale down (a smoke run) or up (a faithful run)
 */
import { HarnessSpec, VerifierSpec } from "@reins/protocol"
import { spawnSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { pathToFileURL } from "node:url"
import { machine, resultsDir, writeReport } from "./report.js"
import { validateAgainst } from "./sim/validate.js"
import { repoRoot, resolveBase } from "./syncVsAsync/base.js"
import { curvesSvg } from "./syncVsAsync/curves.js"
import { goal, type ModeFigures, modeFigures, repeatRatios, spread } from "./syncVsAsync/figures.js"
import { extractProfile } from "./syncVsAsync/profile.js"
import { type Mode, type ModeRecords, modes } from "./syncVsAsync/records.js"
import { runMode, type Workload } from "./syncVsAsync/runMode.js"
import { timelineSvg } from "./syncVsAsync/timeline.js"
import { writeFreshPolicy } from "./syncVsAsync/fresh.js"
import { type Options, parseOptions, resultName } from "./syncVsAsync/options.js"

/**
 * The harness as reins runs it, with the tail preloaded into its process when --tail > 1. With --nice N the harness
 * and verifier processes run at niceness N (the specs' `nice`, which the local launcher also sets
 * on their autogroups), so on this machine, where they share the cores with the device worker,
 * the device gets the CPU first — as when harnesses run on other machines. Every mode runs the
 * same commands.
 */
const harnessSpecs = (o: Options): { harness: HarnessSpec; evalHarness: HarnessSpec } => {
  const dir = path.join(repoRoot, "examples", o.harness)
  const verify = [process.execPath, path.join(dir, "verify.mjs")] as const
  const verifier = new VerifierSpec({ command: verify, cwd: repoRoot, timeout_s: 120, nice: o.nice })
  const trainVerifier = o.reward === "exact"
    ? verifier
    : new VerifierSpec({ command: [process.execPath, path.join(repoRoot, "bench", "syncVsAsync", "shaped-verify.mjs")], cwd: repoRoot, timeout_s: 120, nice: o.nice })
  const base = { cwd: repoRoot, grace_s: 2, nice: o.nice }
  const command = [process.execPath, path.join(dir, "harness.mjs")] as const
  const evalHarness = new HarnessSpec({ ...base, verifier, command, timeout_s: 300 })
  if (o.tail === 1) return { harness: new HarnessSpec({ ...base, verifier: trainVerifier, command, timeout_s: 300 }), evalHarness }
  return {
    harness: new HarnessSpec({
      ...base,
      verifier: trainVerifier,
      command: [process.execPath, "--import", pathToFileURL(path.join(repoRoot, "bench", "syncVsAsync", "tail.mjs")).href, ...command.slice(1)],
      env: { REINS_BENCH_TAIL: String(o.tail), REINS_BENCH_TAIL_UNIT_S: String(o.tailUnitS) },
      timeout_s: 300 * o.tail
    }),
    evalHarness
  }
}

const r3 = (x: number) => Number(x.toPrecision(3))
const pctS = (x: number) => `${(100 * x).toFixed(0)}%`

export default async (args: ReadonlyArray<string>): Promise<void> => {
  const o = parseOptions(args)
  const log = (line: string) => console.error(line)
  const loadBefore = os.loadavg().map(r3)
  const started = performance.now()
  const base = resolveBase(o.harness, o.model, log)
  if (base.fresh) await writeFreshPolicy(base.dir)
  const specs = harnessSpecs(o)
  const w: Workload = {
    ...specs,
    tasksFile: path.join(repoRoot, "examples", o.harness, "tasks", "train.jsonl"),
    testFile: path.join(repoRoot, "examples", o.harness, "tasks", "test.jsonl"),
    modelDir: base.dir,
    groups: o.groups,
    n: o.n,
    asyncGroups: o.asyncGroups,
    maxStaleness: o.maxStaleness,
    updates: o.updates,
    seed: o.seed,
    lr: o.lr,
    // Every admitted rollout gets a process at once (sync: a batch; async: async_groups × n).
    concurrency: Math.max(o.groups, o.asyncGroups) * o.n,
    evalTasks: o.evalTasks,
    evalSamples: o.evalSamples,
    timeoutS: o.timeoutS
  }
  log(`sync-vs-async: ${o.harness}, base ${base.source}; ${o.updates} updates of ${o.groups}×${o.n} rollouts per mode, async ${o.asyncGroups} groups, max_staleness ${o.maxStaleness}, tail ${o.tail}${o.tail === 1 ? "" : ` (unit ${o.tailUnitS} s)`}, reward ${o.reward}, ${o.repeats} repeat(s); load average ${loadBefore.join(" ")}`)

  // Repeats interleave the modes, each starting one mode later, so a drift in machine load
  // does not always hit the same mode.
  const records: Array<ModeRecords> = []
  // Ctrl-C / SIGTERM: interrupt the running mode so its harness processes and temp files go too.
  const abort = new AbortController()
  const stop = (signal: NodeJS.Signals) => {
    log(`${signal}: stopping the running mode`)
    abort.abort()
    process.exitCode = 130
  }
  process.once("SIGINT", stop)
  process.once("SIGTERM", stop)
  for (let rep = 0; rep < o.repeats; rep++) {
    const order = o.modes.map((_, i) => o.modes[(i + rep) % o.modes.length]!)
    for (const mode of order) {
      const t = performance.now()
      log(`[repeat ${rep + 1}/${o.repeats}] ${mode} ...`)
      // pass@1 is measured in the first repeat (the base once): the repeats are for throughput.
      const r = await runMode(w, { mode, repeat: rep, baseEval: rep === 0 && records.length === 0 && o.evalTasks > 0, finalEval: rep === 0, log, signal: abort.signal })
      records.push(r)
      const f = modeFigures(r, o.maxStaleness)
      log(`  ${mode}: ${f.rollouts_trained} rollouts trained in ${f.wall_s.toFixed(1)} s = ${f.rollouts_per_s.toFixed(3)}/s, ${f.updates} updates (${f.skipped_updates} skipped), harness errors ${f.harness_errors}, final pass@1 ${f.final_pass_at_1 ?? "n/a"} (${((performance.now() - t) / 1000).toFixed(0)} s with setup and evaluation)`)
    }
  }
  const basePass = records.find((r) => r.basePassAt1 !== null)?.basePassAt1 ?? null
  const figures = records.map((r) => ({ ...modeFigures(r, o.maxStaleness), base_pass_at_1: basePass }))
  const loadAfter = os.loadavg().map(r3)
  writeResults(o, base.source, records, figures, { before: loadBefore, after: loadAfter }, (performance.now() - started) / 1000)
}

const modeSummary = (mode: Mode, figs: ReadonlyArray<ModeFigures>) => {
  const f = figs.filter((x) => x.mode === mode)
  const first = f[0]!
  const meanOf = (k: (x: ModeFigures) => number) => spread(f.map(k)).mean
  const hist: Array<number> = []
  for (const x of f) x.staleness_histogram.forEach((n, s) => (hist[s] = (hist[s] ?? 0) + n))
  const finals = f.map((x) => x.final_pass_at_1).filter((x): x is number => x !== null)
  return {
    devices: first.devices,
    repeats: f.length,
    wall_s: meanOf((x) => x.wall_s),
    rollouts_per_s: meanOf((x) => x.rollouts_per_s),
    rollouts_trained_per_s: spread(f.map((x) => x.rollouts_per_s)),
    rollouts_per_s_per_device: meanOf((x) => x.rollouts_per_s_per_device),
    tokens_trained_per_s: spread(f.map((x) => x.tokens_trained_per_s)),
    device_busy: {
      generating: meanOf((x) => x.device_busy.generating),
      training: meanOf((x) => x.device_busy.training),
      idle: meanOf((x) => x.device_busy.idle)
    },
    paused_s: meanOf((x) => x.paused_s),
    paused_fraction: meanOf((x) => x.paused_fraction),
    held_calls: meanOf((x) => x.held_calls),
    held_mean_s: meanOf((x) => x.held_mean_s),
    delayed_calls: meanOf((x) => x.delayed_calls),
    added_latency_mean_s: meanOf((x) => x.added_latency_mean_s),
    added_latency_p95_s: meanOf((x) => x.added_latency_p95_s),
    carried_over_rollouts: meanOf((x) => x.carried_over_rollouts),
    staleness_histogram: Array.from(hist, (n) => n ?? 0),
    max_staleness_seen: Math.max(...f.map((x) => x.max_staleness_seen)),
    max_staleness: first.max_staleness,
    final_reward: f.map((x) => x.final_reward),
    final_pass_at_1: finals.length === 0 ? null : finals.reduce((a, b) => a + b, 0) / finals.length,
    harness_errors: f.reduce((s, x) => s + x.harness_errors, 0),
    context_full_calls: f.reduce((s, x) => s + x.context_full_calls, 0),
    failed_rollouts: f.reduce((s, x) => s + x.failed_rollouts, 0),
    skipped_updates: f.reduce((s, x) => s + x.skipped_updates, 0),
    timed_out: f.some((x) => x.timed_out)
  }
}

const writeResults = (
  o: Options,
  baseSource: string,
  records: ReadonlyArray<ModeRecords>,
  figures: ReadonlyArray<ModeFigures>,
  load: { readonly before: ReadonlyArray<number>; readonly after: ReadonlyArray<number> },
  elapsedS: number
) => {
  const name = resultName(o)
  const outDir = path.resolve(o.out ?? resultsDir)
  const summaries = Object.fromEntries(o.modes.map((m) => [m, modeSummary(m, figures)])) as Record<Mode, ReturnType<typeof modeSummary>>
  const all = o.modes.length === modes.length
  const perRepeat = all ? Array.from({ length: o.repeats }, (_, rep) => repeatRatios(figures.filter((f) => f.repeat === rep))) : []
  const ratios = all
    ? {
      collocated_vs_sync: spread(perRepeat.map((r) => r.collocated_vs_sync)).mean,
      collocated_vs_split_per_device: spread(perRepeat.map((r) => r.collocated_vs_split_per_device)).mean,
      spread: {
        collocated_vs_sync: spread(perRepeat.map((r) => r.collocated_vs_sync)),
        collocated_vs_split_per_device: spread(perRepeat.map((r) => r.collocated_vs_split_per_device))
      },
      per_repeat: perRepeat
    }
    : null
  const goals = ratios === null
    ? null
    : {
      collocated_vs_sync: goal("collocated vs sync (rollouts trained/s)", 2.5, ratios.collocated_vs_sync),
      collocated_vs_split_per_device: goal("collocated vs split, per device", 0.9, ratios.collocated_vs_split_per_device)
    }
  const profile = extractProfile(records, `measured: bench/sync-vs-async.ts, ${o.harness}, ${records.length} runs on ${machine().cores} cores (tail ${o.tail} included), ${new Date().toISOString()}`)
  const config = {
    harness: o.harness,
    n: o.n,
    batch_groups: o.groups,
    async_groups: o.asyncGroups,
    max_staleness: o.maxStaleness,
    tail: o.tail,
    tail_unit_s: o.tailUnitS,
    nice: o.nice,
    reward: o.reward,
    // The profile above already holds the run's tail: simulate it as measured.
    sim_tail: 1,
    updates: o.updates,
    warmup_updates: 0,
    repeats: o.repeats,
    scale: o.scale,
    lr: o.lr,
    seed: o.seed,
    eval_tasks: o.evalTasks,
    eval_samples: o.evalSamples,
    concurrency: Math.max(o.groups, o.asyncGroups) * o.n
  }
  const backends = [...new Set(records.map((r) => r.backend))]
  const json = {
    harness: o.harness,
    base_model: baseSource,
    device_backend: backends.join(", "),
    config,
    load_average: load,
    elapsed_s: elapsedS,
    modes: summaries,
    collocated_vs_sync: ratios?.collocated_vs_sync ?? null,
    collocated_vs_split_per_device: ratios?.collocated_vs_split_per_device ?? null,
    ratios,
    goals,
    profile,
    runs: figures
  }
  const validation = validateAgainst(json, { n: o.n, batch_groups: o.groups, async_groups: o.asyncGroups, max_staleness: o.maxStaleness, seed: 1, split_train_fraction: 0.5, updates: o.updates, warmup_updates: 0 }, "this run")
  const sim = validation.status === "ok"
    ? { ...validation, text: `${validation.modes.map((m) => `${m.schedule} ${(m.relative_error * 100).toFixed(0)}%`).join(", ")}; mean |error| ${(validation.mean_abs_error * 100).toFixed(0)}%` }
    : validation

  const row = (m: Mode) => {
    const s = summaries[m]
    const r = s.rollouts_trained_per_s
    return [
      m,
      s.devices,
      r3(s.wall_s),
      o.repeats > 1 ? `${r3(r.mean)} [${r3(r.min)}–${r3(r.max)}]` : r3(r.mean),
      r3(s.rollouts_per_s_per_device),
      r3(s.tokens_trained_per_s.mean),
      `${pctS(s.device_busy.generating)} / ${pctS(s.device_busy.training)} / ${pctS(s.device_busy.idle)}`,
      r3(s.paused_s),
      `${r3(s.held_calls)} (${r3(s.held_mean_s)} s)`,
      `${r3(s.added_latency_mean_s)} / ${r3(s.added_latency_p95_s)}`,
      s.staleness_histogram.join(" "),
      `${s.max_staleness_seen} / ${s.max_staleness}`,
      s.final_pass_at_1 === null ? "n/a" : r3(s.final_pass_at_1),
      s.harness_errors
    ]
  }
  const ld = (l: ReadonlyArray<number>) => l.join(" ")
  const notes = [
    `Workload: ${o.harness} harness (real processes), base ${baseSource}; per mode ${o.updates} updates of ${o.groups} groups × ${o.n} rollouts, async modes keep ${o.asyncGroups} groups running with max_staleness ${o.maxStaleness}; lr ${o.lr}, seed ${o.seed}; tail ${o.tail}${o.tail === 1 ? "" : ` (slow tasks wait ${r3((o.tail - 1) * o.tailUnitS)} s after the harness)`}; harness and verifier processes at nice ${o.nice}; scale ${o.scale}.`,
    o.reward === "shaped"
      ? "Training reward: shaped — the calc verifier's 1 for a right answer, else partial credit 0.5 × max(0, 1 − |answer − reference| / max(10, |reference|)) (bench/syncVsAsync/shaped-verify.mjs), so the weak base policy has reward variance in its groups; pass@1 counts exact answers only (the unmodified verifier)."
      : "Training reward: the harness's own verifier (exact).",
    `Device backend: ${backends.join(", ")} (the device worker's tfjs backend; REINS_BACKEND picks it).`,
    `Machine: ${machine().cores} cores (${machine().cpu}), shared with other work: load average ${ld(load.before)} before, ${ld(load.after)} after. ${o.repeats} repeat(s) per mode, modes interleaved; spreads are min–max over repeats. Total ${elapsedS.toFixed(0)} s.`,
    "Rollouts/s = rollouts trained (in a published update) per second of wall time from the first task handed out to the last update; devices: collocated and sync 1, split 2 (generation + training).",
    "Device busy = generating / training / idle fractions of device-time (both devices in split). Paused = Gateway paused (split: generation stopped for the weight swap). Held calls = calls that waited at the pause gate (mean wait); added latency = mean / p95 of the part of a call's latency (as the harness saw it) that overlapped a pause, over the calls it delayed.",
    "Staleness histogram = trained action tokens by staleness 0, 1, 2, ...",
    ...(ratios === null
      ? ["Ratios need all four modes (--modes was a subset)."]
      : [
        `collocated_vs_sync = ${ratios.collocated_vs_sync.toFixed(2)} (better collocated variant per repeat: ${perRepeat.map((r) => r.collocated_variant).join(", ")}; drain ${perRepeat.map((r) => r.drain_vs_sync.toFixed(2)).join(", ")}, interrupt ${perRepeat.map((r) => r.interrupt_vs_sync.toFixed(2)).join(", ")})${o.repeats > 1 ? `, spread ${ratios.spread.collocated_vs_sync.min.toFixed(2)}–${ratios.spread.collocated_vs_sync.max.toFixed(2)}` : ""}.`,
        `collocated_vs_split_per_device = ${ratios.collocated_vs_split_per_device.toFixed(2)}${o.repeats > 1 ? ` (spread ${ratios.spread.collocated_vs_split_per_device.min.toFixed(2)}–${ratios.spread.collocated_vs_split_per_device.max.toFixed(2)})` : ""}.`,
        goals!.collocated_vs_sync.text,
        goals!.collocated_vs_split_per_device.text
      ]),
    `Final pass@1: ${o.evalTasks > 0 ? `${o.evalTasks} held-out tasks × ${o.evalSamples} samples at the harness's temperature, in the first repeat; base policy ${figures[0]?.base_pass_at_1 ?? "n/a"}` : "not evaluated (--quick or --eval-tasks 0)"}.`,
    `Simulation (bench/sim) on the measured profile: ${sim.status === "ok" ? `relative error of predicted rollouts/s: ${sim.text}` : `skipped: ${sim.reason}`}.`,
    ...(o.modes.some((m) => summaries[m].harness_errors > 0) ? ["HARNESS ERRORS: some harness saw a failed call (must be 0)."] : []),
    ...(o.modes.some((m) => summaries[m].timed_out) ? [`TIMED OUT: ${o.modes.filter((m) => summaries[m].timed_out).join(", ")} did not finish their updates within --timeout.`] : []),
    ...(o.modes.some((m) => summaries[m].skipped_updates > 0) ? [`Skipped updates (every group of the batch had zero reward variance, nothing to train; their rollouts are not counted): ${o.modes.map((m) => `${m} ${summaries[m].skipped_updates}`).join(", ")}.`] : []),
    `Figures: ${name}-timeline-<mode>.svg (device timeline of the first repeat), ${name}-reward.svg (reward and pass@1 over wall time).`
  ]
  writeReport({
    name,
    json: { ...json, sim_validation: sim },
    table: {
      columns: ["mode", "devices", "wall s", "rollouts/s", "per device", "tokens/s", "busy gen / train / idle", "paused s", "held calls (mean)", "added latency mean / p95 s", "staleness hist", "max staleness seen / bound", "final pass@1", "harness errors"],
      rows: o.modes.map(row)
    },
    chart: {
      title: `sync vs collocated vs split (${o.harness}): rollouts trained per second`,
      unit: "rollouts / s",
      groups: o.modes.map((m) => ({
        label: m,
        bars: [
          { series: "rollouts/s", value: summaries[m].rollouts_per_s },
          { series: "rollouts/s per device", value: summaries[m].rollouts_per_s_per_device }
        ]
      }))
    },
    notes
  }, outDir)
  const first = records.filter((r) => r.repeat === 0)
  for (const r of first) {
    const f = figures.find((x) => x.repeat === 0 && x.mode === r.mode)!
    const title = `${r.mode}: ${f.rollouts_trained} rollouts trained in ${f.wall_s.toFixed(1)} s (${f.rollouts_per_s.toFixed(2)}/s on ${r.devices} device${r.devices > 1 ? "s" : ""}), ${o.harness}, tail ${o.tail}`
    writeFileSync(path.join(outDir, `${name}-timeline-${r.mode}.svg`), timelineSvg(r, title) + "\n")
  }
  const curves = first.map((r) => ({
    mode: r.mode,
    reward: r.versions.filter((v) => v.rewardMean !== null).map((v) => [(v.at - r.t0) / 1000, v.rewardMean!] as const),
    basePassAt1: figures[0]?.base_pass_at_1 ?? null,
    finalPassAt1: r.finalPassAt1,
    wallS: (r.tEnd - r.t0) / 1000
  }))
  writeFileSync(path.join(outDir, `${name}-reward.svg`), curvesSvg(curves, `Reward and test pass@1 over wall time (${o.harness}, first repeat)`) + "\n")
  console.log(`wrote ${path.join(outDir, name)}-timeline-{${first.map((r) => r.mode).join(",")}}.svg and ${name}-reward.svg`)
  renderPngs(outDir, [...first.map((r) => `${name}-timeline-${r.mode}`), `${name}-reward`, name])
}

/** PNG copies of the figures (for READMEs) when `rsvg-convert` (librsvg) is installed; optional. */
const renderPngs = (dir: string, names: ReadonlyArray<string>) => {
  if (spawnSync("rsvg-convert", ["--version"], { stdio: "ignore" }).status !== 0) {
    console.log("PNG copies skipped: rsvg-convert not found (apt-get install librsvg2-bin)")
    return
  }
  for (const n of names) {
    const r = spawnSync("rsvg-convert", ["--background-color", "white", "-o", path.join(dir, `${n}.png`), path.join(dir, `${n}.svg`)], { encoding: "utf8" })
    if (r.status !== 0) console.log(`PNG of ${n} failed: ${r.stderr.trim()}`)
  }
  console.log(`wrote PNG copies of ${names.length} figures`)
}
