/**
 * The schedule simulation (bench/sim/): hand-checkable cases with constant durations, the long
 * tail's effect, the admission bound in the trace, split's device partition, determinism. The
 * staleness cases run with the simulator's gate and with the Trainer's own `StalenessGate`.
 */
import { StalenessGate } from "@reins/trainer"
import { describe, expect, it } from "vitest"
import { type GateFactory, simGate } from "../../bench/sim/gate.js"
import { defaultProfile, parseProfile, ProfileError, updateTime, type WorkloadProfile } from "../../bench/sim/profile.js"
import { type SimConfig, simulate } from "../../bench/sim/schedules.js"
import { runSweep, defaultSweep } from "../../bench/sim/sweep.js"
import { validateAgainst } from "../../bench/sim/validate.js"

/**
 * Every rollout: 0.5 s start-up, one call of 100 tokens, no tool time. The decode curve is
 * linear (1000 tok/s per sequence at any concurrency), so a call takes 0.1 s; an update of
 * `tokens` on one device takes 0.2 + 0.001 × tokens.
 */
const constant: WorkloadProfile = {
  source: "test: constant durations",
  rollout: {
    launch_s: { kind: "constant", value: 0.5 },
    turns: { kind: "constant", value: 1 },
    tokens_per_call: { kind: "constant", value: 100 },
    tool_s: { kind: "constant", value: 0 },
    train_tokens_per_generated: 1,
    task_correlation: 0
  },
  device: {
    decode: [
      { concurrency: 1, tok_per_s: 1000 },
      { concurrency: 1024, tok_per_s: 1_024_000 }
    ],
    update_fixed_s: 0.2,
    update_s_per_token: 0.001,
    pause_s: 0.05,
    weight_sync_s: 0.03,
    allreduce_s: 0.01,
    allreduce_latency_s: 0.002
  }
}

const config = (over: Partial<SimConfig>): SimConfig => ({
  schedule: "sync",
  devices: 1,
  n: 2,
  batch_groups: 2,
  async_groups: 2,
  max_staleness: 1,
  updates: 10,
  warmup_updates: 2,
  tail: 1,
  seed: 7,
  split_train_fraction: 0.5,
  ...over
})

describe("constant durations give the analytic throughput", () => {
  it("sync: start-up + decode + update per batch", () => {
    // batch 4 rollouts × 100 tokens: update 0.2 + 0.4 = 0.6 s; period 0.5 + 0.1 + 0.6 = 1.2 s
    const r = simulate(constant, config({ schedule: "sync" }))
    expect(r.rollouts_per_s).toBeCloseTo(4 / 1.2, 9)
    expect(r.busy.generating).toBeCloseTo(0.1 / 1.2, 9)
    expect(r.busy.training).toBeCloseTo(0.6 / 1.2, 9)
    expect(r.max_staleness_seen).toBe(0)
  })

  it("collocated: the next batch's start-up overlaps the update (drain and interrupt alike)", () => {
    // The next groups start when the batch finishes; their 0.5 s start-up hides under the
    // 0.6 s update + 0.05 s pause, and their calls are held until the resume: period 0.75 s.
    for (const schedule of ["collocated-drain", "collocated-interrupt"] as const) {
      const r = simulate(constant, config({ schedule }))
      expect(r.rollouts_per_s).toBeCloseTo(4 / 0.75, 9)
      expect(r.held_call_fraction).toBeGreaterThan(0.5)
      expect(r.held_mean_s).toBeCloseTo(0.15, 9)
    }
  })

  it("sync on 2 devices: training splits over them, plus the all-reduce", () => {
    // batch 16 × 100 tokens over 2 devices: 0.2 + 0.8 + 0.01 × 2 × 1/2 + 0.002 × 1 = 1.012 s
    expect(updateTime(constant.device, 1600, 2)).toBeCloseTo(1.012, 12)
    const r = simulate(constant, config({ schedule: "sync", devices: 2, batch_groups: 8 }))
    expect(r.rollouts_per_s).toBeCloseTo(16 / (0.5 + 0.1 + 1.012), 9)
    expect(r.rollouts_per_s_per_device).toBeCloseTo(r.rollouts_per_s / 2, 12)
  })

  it("a saturated decode curve slows every sequence when more decode together", () => {
    // Flat at 1000 tok/s in aggregate: 4 sequences share it, 0.4 s per call.
    const flat = { ...constant, device: { ...constant.device, decode: [{ concurrency: 1, tok_per_s: 1000 }] } }
    const r = simulate(flat, config({ schedule: "sync" }))
    expect(r.rollouts_per_s).toBeCloseTo(4 / (0.5 + 0.4 + 0.6), 9)
    expect(r.mean_decode_concurrency).toBeCloseTo(4, 9)
  })
})

describe("long tail", () => {
  const at = (schedule: SimConfig["schedule"], tail: number) =>
    simulate(defaultProfile, config({ schedule, devices: 8, n: 4, batch_groups: 32, async_groups: 64, updates: 6, tail, seed: 3 })).rollouts_per_s

  it("sync loses throughput to a longer tail; collocated keeps more of it", () => {
    const sync1 = at("sync", 1), sync4 = at("sync", 4)
    const coll1 = at("collocated-interrupt", 1), coll4 = at("collocated-interrupt", 4)
    expect(coll1).toBeGreaterThan(sync1)
    expect(sync4).toBeLessThan(sync1)
    expect(coll4 / coll1).toBeGreaterThan(sync4 / sync1)
    expect(coll4 / sync4).toBeGreaterThan(coll1 / sync1)
  })
})

/** The simulator's copy of the staleness rules, and the rules the Trainer runs with. */
const gates: ReadonlyArray<readonly [string, GateFactory]> = [
  ["the simulator's gate", simGate],
  ["the Trainer's StalenessGate", (batchGroups, maxStaleness) => new StalenessGate(batchGroups, maxStaleness)]
]

describe("async admission and split", () => {
  it.each(gates)("no group is admitted beyond consumed + (max_staleness + 1) × batch_groups (%s)", (_, gate) => {
    for (const schedule of ["collocated-drain", "collocated-interrupt", "split"] as const) {
      for (const max_staleness of [0, 2]) {
        const c = config({ schedule, devices: 4, n: 4, batch_groups: 4, async_groups: 12, max_staleness, tail: 4, trace: true })
        const r = simulate(defaultProfile, c, gate)
        const admissions = r.trace!.admissions
        expect(admissions.length).toBeGreaterThan(c.async_groups)
        for (const a of admissions) expect(a.admitted).toBeLessThanOrEqual(a.consumed + (max_staleness + 1) * c.batch_groups)
        // The bound binds: with async_groups = 3 × batch_groups some admission hits it exactly.
        expect(admissions.some((a) => a.admitted === a.consumed + (max_staleness + 1) * c.batch_groups)).toBe(true)
      }
    }
  })

  it.each(gates)("the gate keeps trained staleness within max_staleness, however long the tail (%s)", (_, gate) => {
    // Long tail, many groups running: without the gate a slow group would be trained 4-8
    // versions after it started (what admission alone allowed).
    for (const schedule of ["collocated-drain", "collocated-interrupt", "split"] as const) {
      for (const max_staleness of [0, 1, 2]) {
        for (const seed of [1, 2, 3]) {
          const c = config({ schedule, devices: 2, n: 4, batch_groups: 2, async_groups: 8, max_staleness, updates: 20, warmup_updates: 0, tail: 8, seed, trace: true })
          const r = simulate(defaultProfile, c, gate)
          expect(r.max_staleness_seen).toBeLessThanOrEqual(max_staleness)
          expect(Object.keys(r.staleness).map(Number).every((s) => s <= max_staleness)).toBe(true)
          // Every update trained at least a whole batch (oldest first, due groups on top).
          for (const u of r.trace!.updates) expect(u.rollouts).toBeGreaterThanOrEqual(c.batch_groups * c.n)
        }
      }
    }
  })

  it("the simulator's gate decides as the Trainer's: the same seeded runs give the same results", () => {
    const trainer = gates[1]![1]
    for (const schedule of ["sync", "collocated-drain", "collocated-interrupt", "split"] as const) {
      for (const max_staleness of [0, 1, 2]) {
        for (const seed of [1, 2, 3]) {
          const c = config({ schedule, devices: 2, n: 4, batch_groups: 2, async_groups: 8, max_staleness, updates: 20, warmup_updates: 0, tail: 8, seed, trace: true })
          expect(simulate(defaultProfile, c, simGate)).toEqual(simulate(defaultProfile, c, trainer))
        }
      }
    }
  })

  it("split on 8 devices generates on 4 and trains on 4, then syncs weights", () => {
    const r = simulate(constant, config({ schedule: "split", devices: 8, batch_groups: 8, async_groups: 16, trace: true }))
    expect(r.generation_devices).toBe(4)
    expect(r.training_devices).toBe(4)
    for (const u of r.trace!.updates) expect(u.end - u.start).toBeCloseTo(updateTime(constant.device, u.tokens, 4) + constant.device.weight_sync_s, 9)
    expect(simulate(constant, config({ schedule: "split", devices: 2 })).training_devices).toBe(1)
  })

  it("rejects impossible configurations with a clear error", () => {
    expect(() => simulate(constant, config({ schedule: "split", devices: 1 }))).toThrow(/devices must be an integer >= 2/)
    expect(() => simulate(constant, config({ schedule: "collocated-drain", async_groups: 1 }))).toThrow(/async_groups/)
    expect(() => simulate(constant, config({ tail: 0.5 }))).toThrow(/tail/)
  })
})

describe("determinism", () => {
  it("the same seed gives the same result; another seed another one", () => {
    const c = config({ schedule: "collocated-interrupt", devices: 8, n: 4, batch_groups: 32, async_groups: 64, updates: 4, tail: 2 })
    const a = simulate(defaultProfile, c)
    expect(simulate(defaultProfile, c)).toEqual(a)
    expect(simulate(defaultProfile, { ...c, seed: c.seed + 1 }).rollouts_per_s).not.toBe(a.rollouts_per_s)
  })
})

describe("profile, sweep and validation", () => {
  it("the default profile survives a JSON round trip; a bad field is named", () => {
    expect(parseProfile(JSON.parse(JSON.stringify(defaultProfile)))).toEqual(defaultProfile)
    const bad = JSON.parse(JSON.stringify(defaultProfile))
    bad.rollout.tool_s = { kind: "lognormal", median: -1, sigma: 1 }
    expect(() => parseProfile(bad)).toThrow(ProfileError)
    expect(() => parseProfile(bad)).toThrow(/\$\.rollout\.tool_s\.median/)
    bad.rollout.tool_s = { kind: "weibull" }
    expect(() => parseProfile(bad)).toThrow(/\$\.rollout\.tool_s\.kind/)
  })

  it("the sweep reports both ratios at each point", () => {
    const { points, ratios } = runSweep({ ...defaultSweep(constant), devices: [1, 8], tails: [1], target_rollouts: 64 })
    expect(points).toHaveLength(8)
    expect(points.find((p) => p.schedule === "split" && p.nominal_devices === 1)!.devices).toBe(2)
    for (const r of ratios) {
      const sync = points.find((p) => p.schedule === "sync" && p.nominal_devices === r.devices)!
      const coll = points.find((p) => p.schedule === r.collocated_variant && p.nominal_devices === r.devices)!
      expect(r.collocated_vs_sync).toBeCloseTo(coll.rollouts_per_s / sync.rollouts_per_s, 12)
    }
  })

  it("validation simulates the measured configuration and reports the relative error", () => {
    const defaults = { n: 2, batch_groups: 2, async_groups: 2, max_staleness: 1, seed: 7, split_train_fraction: 0.5, updates: 10, warmup_updates: 2 }
    const measured = { profile: constant, modes: { sync: { rollouts_per_s: 4 / 1.2 * 1.1, devices: 1 }, collocated_drain: { rollouts_per_s: 4 / 0.75 } } }
    const v = validateAgainst(JSON.parse(JSON.stringify(measured)), defaults, "test")
    if (v.status !== "ok") throw new Error(`expected ok, got ${v.reason}`)
    expect(v.modes.map((m) => m.schedule)).toEqual(["sync", "collocated-drain"])
    expect(v.modes[0]!.relative_error).toBeCloseTo(1 / 1.1 - 1, 9)
    expect(v.modes[1]!.relative_error).toBeCloseTo(0, 9)
    expect(validateAgainst({ modes: {} }, defaults, "x")).toMatchObject({ status: "skipped" })
  })
})
