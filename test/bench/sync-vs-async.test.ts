/**
 * The pure parts of bench/sync-vs-async.ts on synthetic records: per-mode figures (throughput,
 * held calls and the latency a pause added, staleness, harness errors), the ratios and goals,
 * the device timeline SVG, the workload profile extracted for bench/sim, and the options.
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { describe, expect, it } from "vitest"
import { parseProfile } from "../../bench/sim/profile.js"
import { validateAgainst } from "../../bench/sim/validate.js"
import { goal, type ModeFigures, modeFigures, overlap, repeatRatios, subtract, union } from "../../bench/syncVsAsync/figures.js"
import { parseOptions, resultName, uncontendedRolloutS } from "../../bench/syncVsAsync/options.js"
import { decodeCurve, extractProfile, intraClassCorrelation, linearFit } from "../../bench/syncVsAsync/profile.js"
import type { CallRec, Mode, ModeRecords, RolloutRec, VersionRec } from "../../bench/syncVsAsync/records.js"
import { assignSlots, timelineSvg } from "../../bench/syncVsAsync/timeline.js"
import { curvesSvg } from "../../bench/syncVsAsync/curves.js"

const T0 = 1_700_000_000_000
const s = (sec: number) => T0 + sec * 1000

const call = (from: number, gen: number, to: number, over: Partial<CallRec> = {}): CallRec => ({
  receivedAt: s(from),
  startedAt: s(gen),
  finishedAt: s(to),
  heldMs: (gen - from) * 1000,
  promptTokens: 40,
  outputTokens: 10,
  status: 200,
  error: null,
  minVersion: 0,
  maxVersion: 0,
  ...over
})

const rollout = (id: string, group: string, start: number, end: number, calls: ReadonlyArray<CallRec>, over: Partial<RolloutRec> = {}): RolloutRec => ({
  id,
  group,
  state: "succeeded",
  reward: 1,
  createdAt: s(start),
  startedAt: s(start),
  finishedAt: s(end),
  attempts: 1,
  calls,
  trained: true,
  ...over
})

const version = (v: number, at: number, over: Partial<VersionRec> = {}): VersionRec => ({
  version: v,
  at: s(at),
  wallSeconds: 5,
  rollouts: 2,
  tokens: 200,
  actionTokens: 40,
  rewardMean: 0.5,
  passRate: 0.5,
  staleness: [30, 10],
  stalenessMax: 1,
  pauseSeconds: 1,
  heldCalls: 1,
  device: { generating: 0.4, training: 0.2, idle: 0.4 },
  ...over
})

/**
 * A collocated run of 10 s: two updates (pauses 4–5 s and 9–10 s). r1 is held at the first pause
 * for 1 s and r2 runs across it (both carry tokens of versions 0 and 1); r3 was still running at the
 * end (cancelled, its last call cut off: not a harness error); r4 failed with a 500.
 */
const collocated = (mode: Mode = "collocated-interrupt"): ModeRecords => ({
  mode,
  devices: mode === "split" ? 2 : 1,
  backend: "wasm",
  repeat: 0,
  t0: s(0),
  tEnd: s(10),
  rollouts: [
    rollout("r1", "g1", 0, 6, [call(1, 1, 2), call(4.5, 5.5, 5.8, { minVersion: 1, maxVersion: 1 })]),
    rollout("r2", "g1", 0, 7, [call(3, 3, 6, { heldMs: 0, minVersion: 0, maxVersion: 1 })]),
    rollout("r3", "g2", 6, 12, [call(8, 8, 12, { status: 499, heldMs: 0 })], { state: "cancelled", trained: false, finishedAt: s(12) }),
    rollout("r4", "g2", 6, 8, [call(6.5, 6.5, 7, { status: 500, error: "engine_error: boom", heldMs: 0 })], { state: "failed", trained: false })
  ],
  versions: [version(1, 5), version(2, 10, { staleness: [20, 5, 0], stalenessMax: 1 })],
  pauses: [{ start: s(4), end: s(5) }, { start: s(9), end: s(10) }],
  trains: [{ start: s(4.2), end: s(5), tokens: 200 }, { start: s(9.1), end: s(10), tokens: 300 }],
  syncs: [],
  skipped: 1,
  timedOut: false,
  finalPassAt1: 0.25,
  basePassAt1: 0.125
})

describe("figures of one mode", () => {
  it("throughput, pauses, held calls, added latency, staleness and errors", () => {
    const f = modeFigures(collocated(), 2)
    expect(f.wall_s).toBe(10)
    expect(f.rollouts_trained).toBe(4)
    expect(f.rollouts_per_s).toBeCloseTo(0.4, 12)
    expect(f.tokens_trained_per_s).toBeCloseTo(40, 12)
    expect(f.paused_s).toBeCloseTo(2, 12)
    // r1's second call waited 1 s at the gate; r2's call was interrupted for the 1 s pause.
    expect(f.held_calls).toBe(1)
    expect(f.held_mean_s).toBeCloseTo(1, 12)
    expect(f.delayed_calls).toBe(3) // r1's held call, r2's interrupted one, r3's call across the second pause
    expect(f.added_latency_mean_s).toBeCloseTo((0.5 + 1 + 1) / 3, 12)
    // r1 (second call after the update) and r2 (interrupted mid-call) hold tokens of two versions.
    expect(f.carried_over_rollouts).toBe(2)
    expect(f.staleness_histogram).toEqual([50, 15, 0])
    expect(f.max_staleness_seen).toBe(1)
    expect(f.max_staleness).toBe(2)
    // The 499 of a cancelled rollout is the run ending, not a harness error; the 500 is one.
    expect(f.harness_errors).toBe(1)
    expect(f.context_full_calls).toBe(0)
    // A context-limit 400 is where a long episode ended: counted apart, not as a harness error.
    const full = call(6.5, 6.5, 7, { status: 400, error: "context_length_exceeded: too long", heldMs: 0 })
    const withFull = { ...collocated(), rollouts: [...collocated().rollouts, rollout("r5", "g2", 6, 8, [full], { trained: false })] }
    expect(modeFigures(withFull, 2)).toMatchObject({ harness_errors: 1, context_full_calls: 1 })
    expect(f.failed_rollouts).toBe(1)
    expect(f.skipped_updates).toBe(1)
    expect(f.device_busy.generating + f.device_busy.training + f.device_busy.idle).toBeCloseTo(1, 12)
    expect(modeFigures({ ...collocated(), mode: "sync" }, 2).max_staleness).toBe(0)
  })

  it("interval helpers", () => {
    const u = union([{ start: 5, end: 7 }, { start: 1, end: 3 }, { start: 2, end: 4 }, { start: 9, end: 9 }])
    expect(u).toEqual([{ start: 1, end: 4 }, { start: 5, end: 7 }])
    expect(overlap(0, 6, u)).toBe(4)
    expect(overlap(4, 5, u)).toBe(0)
    expect(subtract(0, 8, u)).toEqual([{ start: 0, end: 1 }, { start: 4, end: 5 }, { start: 7, end: 8 }])
    expect(subtract(2, 3, u)).toEqual([])
    expect(subtract(4.5, 4.8, u)).toEqual([{ start: 4.5, end: 4.8 }])
  })
})

const fig = (mode: Mode, rate: number, devices = mode === "split" ? 2 : 1): ModeFigures =>
  ({ ...modeFigures(collocated(mode), 2), mode, repeat: 0, devices, rollouts_per_s: rate, rollouts_per_s_per_device: rate / devices })

describe("ratios and goals", () => {
  it("collocated is the better variant; per device against split's two devices", () => {
    const r = repeatRatios([fig("sync", 1), fig("collocated-drain", 2), fig("collocated-interrupt", 2.6), fig("split", 3)])
    expect(r.collocated_variant).toBe("collocated-interrupt")
    expect(r.collocated_vs_sync).toBeCloseTo(2.6, 12)
    expect(r.collocated_vs_split_per_device).toBeCloseTo(2.6 / 1.5, 12)
    expect(r.drain_vs_sync).toBeCloseTo(2, 12)
    const d = repeatRatios([fig("sync", 1), fig("collocated-drain", 2), fig("collocated-interrupt", 1.5), fig("split", 3)])
    expect(d.collocated_variant).toBe("collocated-drain")
    expect(() => repeatRatios([fig("sync", 1)])).toThrow(/no collocated-drain/)
  })

  it("a missed goal says so and by how much", () => {
    expect(goal("x", 2.5, 3)).toMatchObject({ met: true, missed_by: 0 })
    const missed = goal("collocated vs sync", 2.5, 2)
    expect(missed.met).toBe(false)
    expect(missed.missed_by).toBeCloseTo(0.2, 12)
    expect(missed.text).toMatch(/MISSED — measured 2\.00, 20% short/)
  })
})

describe("device timeline", () => {
  it("slots: a rollout takes the lowest slot free at its start", () => {
    expect(assignSlots([{ start: 0, end: 5 }, { start: 1, end: 2 }, { start: 2, end: 6 }, { start: 5, end: 7 }])).toEqual([0, 1, 1, 0])
    expect(assignSlots([])).toEqual([])
  })

  it("draws device rows, rollouts (trained, partial, untrained), held calls, updates and versions", () => {
    const svg = timelineSvg(collocated(), "collocated <test>")
    expect(svg.startsWith("<svg")).toBe(true)
    expect(svg.trim().endsWith("</svg>")).toBe(true)
    expect(svg).toContain("collocated &lt;test&gt;")
    expect(svg).toContain(">device</text>")
    expect(svg).not.toContain("training device")
    // One bar per rollout, coloured by what happened to it.
    expect(svg.match(/<title>r\d: /g)).toHaveLength(4)
    expect(svg).toMatch(/fill="#f6b26b"><title>r2: .*versions 0–1/)
    expect(svg).toMatch(/fill="#d9d9d9"><title>r3: .*not trained \(cancelled\)/)
    expect(svg.match(/fill="#d62728"/g)?.length).toBeGreaterThanOrEqual(2) // r1's held call + legend
    expect(svg.match(/<title>update: /g)).toHaveLength(2)
    expect(svg).toContain(">v1</text>")
    expect(svg).toContain(">v2</text>")
    // Generation stops while paused: no dark bar crosses the middle of the first pause (4–5 s).
    const mid = 130 + (4.5 / 10) * (1100 - 130 - 20)
    const dark = [...svg.matchAll(/<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="[\d.]+" fill="#1f4e79"/g)]
    expect(dark.length).toBeGreaterThan(4)
    for (const m of dark) expect(Number(m[1]) < mid && mid < Number(m[1]) + Number(m[2])).toBe(false)
    // Nothing is drawn outside the plot: every x within the width.
    for (const m of svg.matchAll(/ x="(-?[\d.]+)"/g)) expect(Number(m[1])).toBeGreaterThanOrEqual(0)
  })

  it("split has a generation and a training device, with weight swaps", () => {
    const r = { ...collocated("split"), pauses: [], syncs: [{ start: s(5), end: s(5.2) }] }
    const svg = timelineSvg(r, "split")
    expect(svg).toContain(">generation device</text>")
    expect(svg).toContain(">training device</text>")
    expect(svg.match(/<title>weight swap: 0\.20 s/g)).toHaveLength(1)
  })

  it("reward chart: a line per mode and the pass@1 diamonds", () => {
    const svg = curvesSvg([
      { mode: "sync", reward: [[5, 0.2], [10, 0.4]], basePassAt1: 0.1, finalPassAt1: 0.3, wallS: 10 },
      { mode: "split", reward: [], basePassAt1: 0.1, finalPassAt1: null, wallS: 4 }
    ], "t")
    expect(svg.match(/<polyline/g)).toHaveLength(1)
    expect(svg).toContain("base pass@1 0.100")
    expect(svg).toContain("sync: final pass@1 0.300")
  })
})

describe("workload profile for bench/sim", () => {
  it("decode rate against concurrency; pauses excluded", () => {
    // 0–2 s: one call alone (100 tokens over 2 s: 50 tok/s); 2–4 s: it and a second one (the
    // second makes 300 tokens over 2–4 s: 150 tok/s) → 200 tok/s at concurrency 2.
    const calls = [{ start: s(0), end: s(4), tokens: 200 }, { start: s(2), end: s(4), tokens: 300 }]
    expect(decodeCurve(calls, [])).toEqual([{ concurrency: 1, tok_per_s: 50 }, { concurrency: 2, tok_per_s: 200 }])
    // A pause 1–2 s: the first call generated 200 tokens in 3 s of generating time.
    const paused = decodeCurve([{ start: s(0), end: s(4), tokens: 300 }], [{ start: s(1), end: s(2) }])
    expect(paused).toEqual([{ concurrency: 1, tok_per_s: 100 }])
  })

  it("least squares and intra-class correlation", () => {
    const fit = linearFit([100, 200, 400], [0.3, 0.5, 0.9])
    expect(fit.a).toBeCloseTo(0.1, 9)
    expect(fit.b).toBeCloseTo(0.002, 9)
    expect(linearFit([100, 100], [1, 3])).toEqual({ a: 0, b: 0.02 })
    const grouped = ["a", "a", "b", "b", "c", "c"].map((key, i) => ({ key, value: { a: 1, b: 5, c: 9 }[key]! + (i % 2) * 0.01 }))
    expect(intraClassCorrelation(grouped)).toBeGreaterThan(0.99)
    const mixed = ["a", "a", "b", "b"].map((key, i) => ({ key, value: i % 2 === 0 ? 1 : 9 }))
    expect(intraClassCorrelation(mixed)).toBe(0)
  })

  it("extracts launch, turns, tokens, tool time, update and pause times; sim validates against it", () => {
    const r = collocated("collocated-drain")
    const p = extractProfile([r], "test")
    expect(parseProfile(JSON.parse(JSON.stringify(p)))).toEqual(p)
    // Finished rollouts r1, r2 (r3 cancelled, r4 failed): launch = first call − start.
    expect(p.rollout.launch_s).toEqual({ kind: "samples", values: [1, 3] })
    expect(p.rollout.turns).toEqual({ kind: "samples", values: [2, 1] })
    expect(p.rollout.tokens_per_call).toEqual({ kind: "samples", values: [10, 10, 10] })
    // r1: 2 → 4.5 between its calls, 5.8 → 6 after the last; r2: 6 → 7.
    const toolDist = p.rollout.tool_s
    if (toolDist.kind !== "samples") throw new Error(`expected samples, got ${toolDist.kind}`)
    const tool = toolDist.values
    expect(tool.map((x) => Number(x.toFixed(6)))).toEqual([2.5, 0.2, 1])
    expect(p.rollout.train_tokens_per_generated).toBe(5)
    // Updates: 0.8 s for 200 tokens, 0.9 s for 300; pauses 1 s each around them.
    expect(p.device.update_s_per_token).toBeCloseTo(0.001, 9)
    expect(p.device.update_fixed_s).toBeCloseTo(0.6, 9)
    expect(p.device.pause_s).toBeCloseTo(((1 - 0.8) + (1 - 0.9)) / 2, 9)
    const v = validateAgainst(
      { profile: p, config: { n: 2, batch_groups: 1, async_groups: 2, max_staleness: 1, updates: 3, warmup_updates: 0, sim_tail: 1, tail: 4 }, modes: { "collocated-drain": { rollouts_per_s: 0.4, devices: 1 } } },
      { n: 2, batch_groups: 1, async_groups: 2, max_staleness: 1, seed: 1, split_train_fraction: 0.5, updates: 3, warmup_updates: 0 },
      "test"
    )
    expect(v.status).toBe("ok")
  })
})

describe("options", () => {
  it("defaults, presets and clear errors", () => {
    const d = parseOptions([])
    expect(d).toMatchObject({ harness: "calc", updates: 4, groups: 2, n: 4, asyncGroups: 4, maxStaleness: 2, tail: 1, nice: 19, repeats: 2, scale: "default" })
    expect(d.modes).toEqual(["sync", "collocated-drain", "collocated-interrupt", "split"])
    expect(parseOptions(["--quick"])).toMatchObject({ updates: 2, evalTasks: 0, repeats: 1 })
    expect(parseOptions(["--full", "--updates", "20"])).toMatchObject({ updates: 20, groups: 4, n: 8, repeats: 3 })
    expect(parseOptions(["--groups", "3"]).asyncGroups).toBe(6)
    expect(parseOptions(["--modes", "split,sync"]).modes).toEqual(["sync", "split"])
    expect(() => parseOptions(["--tail", "0.5"])).toThrow(/--tail expects a number >= 1/)
    expect(parseOptions(["--nice", "0"]).nice).toBe(0)
    expect([d.out, parseOptions(["--out", "/tmp/x"]).out]).toEqual([undefined, "/tmp/x"])
    expect([d.tailUnitS, parseOptions(["--harness", "mini-swe"]).tailUnitS, parseOptions(["--tail-unit", "1.5"]).tailUnitS]).toEqual([uncontendedRolloutS.calc, uncontendedRolloutS["mini-swe"], 1.5])
    expect(() => parseOptions(["--tail-unit", "0"])).toThrow(/--tail-unit expects a number > 0/)
    expect(() => parseOptions(["--nice", "20"])).toThrow(/--nice expects 0\.\.19/)
    expect(() => parseOptions(["--harness", "swe"])).toThrow(/calc or mini-swe/)
    // Only calc's natural-spread run writes the default files (the simulation reads them).
    expect([[], ["--tail", "4"], ["--harness", "mini-swe"], ["--harness", "mini-swe", "--tail", "2"]].map((a) => resultName(parseOptions(a))))
      .toEqual(["sync-vs-async", "sync-vs-async-tail4", "sync-vs-async-mini-swe", "sync-vs-async-mini-swe-tail2"])
    expect(() => parseOptions(["--groups", "4", "--async-groups", "2"])).toThrow(/--async-groups/)
    expect(() => parseOptions(["--quick", "--full"])).toThrow(/exclude/)
    expect(() => parseOptions(["--updates"])).toThrow(/needs a value/)
    expect(() => parseOptions(["--modes", "async"])).toThrow(/unknown mode "async"/)
    expect(() => parseOptions(["--speed"])).toThrow(/unknown option "--speed"/)
    expect(d.reward).toBe("shaped")
    expect(parseOptions(["--harness", "mini-swe"]).reward).toBe("exact")
    expect(() => parseOptions(["--harness", "mini-swe", "--reward", "shaped"])).toThrow(/calc harness only/)
  })
})

const script = (name: string) => fileURLToPath(new URL(`../../bench/syncVsAsync/${name}`, import.meta.url))
const node = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  spawnSync(process.execPath, args, { env: { ...process.env, ...env }, encoding: "utf8", timeout: 30_000 })

/**
 * Starts `node args`, waits until its stdout shows `marker` and its main thread sleeps in a futex
 * (the blocking `Atomics.wait` of tail.mjs: an idle event loop sleeps in epoll instead), then
 * sends SIGTERM. Resolves with how the process ended; one still alive `guardMs` after the start
 * gets SIGKILL, so a SIGTERM that did not end it shows as SIGKILL.
 */
const termDuringWait = (args: ReadonlyArray<string>, env: Record<string, string>, marker: string, guardMs: number) =>
  new Promise<{ readonly signal: NodeJS.Signals | null; readonly code: number | null; readonly sleptInFutex: boolean }>((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] })
    const guard = setTimeout(() => child.kill("SIGKILL"), guardMs)
    let out = ""
    let sleptInFutex = false
    const wchan = `/proc/${child.pid}/wchan`
    const inFutex = () => existsSync(wchan) && /futex/.test(readFileSync(wchan, "utf8"))
    child.stdout!.on("data", (d: Buffer) => {
      const seen = out.includes(marker)
      out += d.toString()
      if (seen || !out.includes(marker)) return
      const poll = (left: number) => {
        if (child.exitCode !== null || child.signalCode !== null) return
        if (inFutex()) {
          sleptInFutex = true
          child.kill("SIGTERM")
        } else if (left > 0) setTimeout(() => poll(left - 1), 10)
        else child.kill("SIGTERM")
      }
      poll(1_000)
    })
    child.on("error", reject)
    child.on("exit", (code, signal) => {
      clearTimeout(guard)
      resolve({ signal, code, sleptInFutex })
    })
  })

describe("harness and verifier wrappers", () => {
  it("tail.mjs, preloaded: same output and exit code; slow tasks keep the process (X − 1) × the unit longer", async () => {
    const tail = pathToFileURL(script("tail.mjs")).href
    // The harness also starts a Node process of its own: the settings must not reach it. The wait
    // is measured inside the process (an exit listener registered after the preload's runs after
    // its wait), so a loaded machine's slow process starts do not blur it.
    const child = ["-e", [
      "const fs = require('node:fs'), ended = Date.now()",
      "process.on('exit', () => fs.writeSync(1, `waited ${Date.now() - ended}\\n`))",
      "console.log('out', process.env.REINS_BENCH_TAIL ?? 'unset'); process.exit(3)"
    ].join("; ")]
    const settings = { REINS_BENCH_TAIL: "3", REINS_BENCH_TAIL_UNIT_S: "0.6", REINS_TASK_ID: "t1" }
    const timed = (env: Record<string, string>) => {
      const r = node(["--import", tail, ...child], env)
      const [out, waited] = r.stdout.split(/(?<=\n)(?=waited )/)
      return { status: r.status, stdout: out, stderr: r.stderr, waitedMs: Number(waited?.match(/\d+/)?.[0] ?? NaN) }
    }
    // Not slow: with a unit of an hour, a wait would outlast the 30 s spawn timeout (a kill, no
    // exit status), so exiting on its own with the harness's code is the proof it did not wait.
    const fast = timed({ ...settings, REINS_BENCH_TAIL_UNIT_S: "3600", REINS_BENCH_TAIL_FRACTION: "0" })
    expect([fast.status, fast.stdout]).toEqual([3, "out unset\n"])
    const slow = timed({ ...settings, REINS_BENCH_TAIL_FRACTION: "1" })
    expect([slow.status, slow.stdout]).toEqual([3, "out unset\n"])
    expect(slow.waitedMs).toBeGreaterThanOrEqual(1150) // 2 × 0.6 s; the clocks differ by a few ms
    // Cancelling: a harness whose SIGTERM handler exits (with 128 + 15) does not wait: it exits
    // with 143 itself instead of being killed by spawnSync's timeout during the 29.4 s wait.
    const long = { ...settings, REINS_BENCH_TAIL_FRACTION: "1", REINS_BENCH_TAIL: "50" }
    const handler = "process.on('SIGTERM', () => process.exit(143))"
    const stopped = spawnSync(process.execPath, ["--import", tail, "-e", `${handler}; setInterval(() => {}, 1000); process.kill(process.pid, 'SIGTERM')`], {
      env: { ...process.env, ...long },
      timeout: 20_000
    })
    expect([stopped.status, stopped.signal]).toEqual([143, null])
    // A SIGTERM once the process sleeps in the wait ends it at once, though the harness had a
    // handler (which cannot run while the thread sleeps): signalled while asleep, it dies of the
    // signal, not of the guard's SIGKILL 20 s later (the wait would last 29.4 s). The harness's
    // exit listener, put before the preload's, says when the exit (and so the wait) begins.
    const announce = "process.prependListener('exit', () => require('node:fs').writeSync(1, 'exiting\\n'))"
    const waiting = await termDuringWait(["--import", tail, "-e", `${handler}; ${announce}`], long, "exiting", 20_000)
    expect(waiting).toEqual({ signal: "SIGTERM", code: null, sleptInFutex: true })
    const noUnit = timed({ REINS_BENCH_TAIL: "2" })
    expect(noUnit.status).toBe(2)
    expect(noUnit.stderr).toMatch(/REINS_BENCH_TAIL_UNIT_S must be set/)
    const badUnit = timed({ REINS_BENCH_TAIL: "2", REINS_BENCH_TAIL_UNIT_S: "-1" })
    expect(badUnit.status).toBe(2)
    expect(badUnit.stderr).toMatch(/REINS_BENCH_TAIL_UNIT_S must be a number in \[0, 3600\]/)
    const bad = timed({ REINS_BENCH_TAIL: "0.5" })
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/REINS_BENCH_TAIL must be a number in \[1, 1000\]/)
  })

  it("shaped-verify.mjs: 1 stays 1, a near answer gets partial credit, a task the verifier cannot score stays an error", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-shaped-"))
    try {
      const task = path.join(dir, "task.json"), out = path.join(dir, "out.txt")
      writeFileSync(task, JSON.stringify({ id: "t", input: { question: "29+57" }, answer: 86 }))
      const reward = (answer: string) => {
        writeFileSync(out, `thinking\nANSWER: ${answer}\n`)
        const r = node([script("shaped-verify.mjs")], { REINS_TASK_FILE: task, REINS_STDOUT_FILE: out })
        expect(r.status).toBe(0)
        return Number(r.stdout.trim())
      }
      expect(reward("86")).toBe(1)
      expect(reward("80")).toBeCloseTo(0.5 * (1 - 6 / 86), 4)
      expect(reward("500")).toBe(0)
      expect(reward("no idea")).toBe(0)
      const broken = node([script("shaped-verify.mjs")], { REINS_STDOUT_FILE: out, REINS_TASK_FILE: "", REINS_TASK: "" })
      expect(broken.status).toBe(2)
      expect(broken.stderr).toMatch(/calc verifier: the task is not JSON/)
      writeFileSync(task, JSON.stringify({ id: "t", input: { question: "1+1" } }))
      const noAnswer = node([script("shaped-verify.mjs")], { REINS_TASK_FILE: task, REINS_STDOUT_FILE: out })
      expect([noAnswer.status, noAnswer.stdout]).toEqual([2, ""])
      expect(noAnswer.stderr).toMatch(/task t has no numeric "answer"/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
