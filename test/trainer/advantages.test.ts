import {
  adaptRollout,
  type AdvantageOptions,
  baselineAdvantages,
  buildBatch,
  type RolloutTrace,
  scoreRollouts,
  type ScoredSegment
} from "@reins/trainer"
import { describe, expect, it } from "vitest"
import { call, chain, edited, reward, trace } from "./traces.js"

const grpo: AdvantageOptions = { estimator: "grpo", stdScaling: false, perTurn: false, missingReward: "drop" }
const segmentOptions = { mode: "chain" as const, maxTokens: 1024 }

const score = (traces: ReadonlyArray<RolloutTrace>, options: AdvantageOptions) =>
  scoreRollouts(
    traces.map((t) => ({ trace: t, segments: adaptRollout(t, segmentOptions).segments })),
    options
  )

/** A group of single-call rollouts with these final rewards (null: no reward). */
const group = (groupId: string, rewards: ReadonlyArray<number | null>) =>
  rewards.map((r, i) => {
    const id = `${groupId}-r${i}`
    return trace(id, groupId, chain(id, [[10, 11]]), r === null ? [] : [reward(r, { rolloutId: id })])
  })

/** The advantage of each rollout's action tokens (they must all agree), by rollout id. */
const advantageOf = (samples: ReadonlyArray<ScoredSegment>): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const s of samples) {
    for (let i = 0; i < s.tokens.length; i++) {
      if (s.lossMask[i] === 0) {
        expect(s.advantages[i]).toBe(0)
        continue
      }
      const a = s.advantages[i]!
      if (out[s.rolloutId] === undefined) out[s.rolloutId] = a
      else expect(a).toBeCloseTo(out[s.rolloutId]!, 6)
    }
  }
  return out
}

describe("advantages (checked by hand)", () => {
  it("GRPO without std scaling (Dr. GRPO): reward minus the group mean", () => {
    // rewards 1, 0, 0, 0 → mean 0.25
    const result = score(group("g", [1, 0, 0, 0]), grpo)
    const a = advantageOf(result.samples)
    expect(a["g-r0"]).toBeCloseTo(0.75, 6)
    expect(a["g-r1"]).toBeCloseTo(-0.25, 6)
    expect(a["g-r3"]).toBeCloseTo(-0.25, 6)
    expect(result.groups).toBe(1)
    expect(result.rewards).toEqual([1, 0, 0, 0])
  })

  it("GRPO with std scaling: divided by the sample std", () => {
    // deviations 0.75, -0.25 ×3 → Σ² = 0.75 → sample variance 0.25 → std 0.5
    const a = advantageOf(score(group("g", [1, 0, 0, 0]), { ...grpo, stdScaling: true }).samples)
    expect(a["g-r0"]).toBeCloseTo(1.5, 4)
    expect(a["g-r2"]).toBeCloseTo(-0.5, 4)
  })

  it("RLOO: reward minus the mean of the other rollouts", () => {
    // r0: 1 − mean(0, 0, 0.5) = 5/6; r1: 0 − mean(1, 0, 0.5) = −0.5; r3: 0.5 − mean(1, 0, 0) = 1/6
    const a = advantageOf(score(group("g", [1, 0, 0, 0.5]), { ...grpo, estimator: "rloo" }).samples)
    expect(a["g-r0"]).toBeCloseTo(5 / 6, 6)
    expect(a["g-r1"]).toBeCloseTo(-0.5, 6)
    expect(a["g-r2"]).toBeCloseTo(-0.5, 6)
    expect(a["g-r3"]).toBeCloseTo(1 / 6, 6)
  })

  it("works on plain numbers too", () => {
    expect(Array.from(baselineAdvantages(Float64Array.from([3, 1]), "grpo", false))).toEqual([1, -1])
    expect(Array.from(baselineAdvantages(Float64Array.from([3, 1]), "rloo", false))).toEqual([2, -2])
    expect(Array.from(baselineAdvantages(Float64Array.from([2, 2, 2]), "grpo", true))).toEqual([0, 0, 0])
  })

  it("skips groups with zero variance and counts them with their tokens", () => {
    const result = score([...group("same", [1, 1, 1]), ...group("mixed", [1, 0])], grpo)
    expect(new Set(result.samples.map((s) => s.groupId))).toEqual(new Set(["mixed"]))
    expect(result.drops.snapshot()["group-zero-variance"]).toMatchObject({ count: 1, actionTokens: 6 })
    expect(result.groups).toBe(1)
    // Their rewards still count for the reward metrics.
    expect(result.rewards).toHaveLength(5)
  })

  it("drops rollouts without a reward (counted) or scores them zero, per config", () => {
    const traces = group("g", [1, null, 0])
    const dropped = score(traces, grpo)
    expect(dropped.drops.snapshot()["reward-missing"]).toMatchObject({ count: 1, actionTokens: 2 })
    expect(advantageOf(dropped.samples)).toEqual({ "g-r0": 0.5, "g-r2": -0.5 })

    const zeroed = score(traces, { ...grpo, missingReward: "zero" })
    expect(zeroed.zeroed).toBe(1)
    expect(zeroed.drops.count("reward-missing")).toBe(0)
    const a = advantageOf(zeroed.samples)
    expect(a["g-r1"]).toBeCloseTo(-1 / 3, 6)
    expect(a["g-r0"]).toBeCloseTo(2 / 3, 6)
  })

  it("counts groups too small to have a baseline", () => {
    const result = score(group("solo", [1, null]), grpo)
    expect(result.samples).toHaveLength(0)
    expect(result.drops.snapshot()["group-too-small"]).toMatchObject({ count: 1, actionTokens: 2 })
  })

  it("uses the last final reward of the attempt", () => {
    const t = (id: string, rewards: ReturnType<typeof reward>[]) => trace(id, "g", chain(id, [[10]]), rewards)
    const result = score([t("x", [reward(0, { at: 1 }), reward(1, { at: 2 })]), t("y", [reward(0, { at: 1 })])], grpo)
    expect(advantageOf(result.samples)).toEqual({ x: 0.5, y: -0.5 })
  })

  it("gives every segment of a rollout the rollout's advantage", () => {
    const split = trace("split", "g", edited("split", [[10], [11, 12], [13]]), [reward(1)])
    const whole = trace("whole", "g", chain("whole", [[10], [11, 12], [13]]), [reward(0)])
    const result = score([split, whole], grpo)
    expect(result.samples.filter((s) => s.rolloutId === "split")).toHaveLength(3)
    expect(advantageOf(result.samples)).toEqual({ split: 0.5, whole: -0.5 })
  })
})

describe("per-turn rewards", () => {
  // Rollout a: 3 turns; final 1; +0.5 at turn 0, +0.25 at turn 2 → G = [1.75, 1.25, 1.25]
  // Rollout b: 2 turns; final 0; +1 at turn 1            → G = [1, 1], and 0 past its end
  const a = chain("a", [[10], [11], [12]])
  const b = chain("b", [[20], [21]])
  const traces = [
    trace("a", "g", a, [reward(1, { rolloutId: "a" }), reward(0.5, { callId: "a-c1" }), reward(0.25, { callId: "a-c3" })]),
    trace("b", "g", b, [reward(0, { rolloutId: "b" }), reward(1, { callId: "b-c2" })])
  ]

  /** Advantage of each call's response tokens: callId → value. */
  const byCall = (samples: ReadonlyArray<ScoredSegment>) =>
    Object.fromEntries(samples.flatMap((s) => s.spans.map((span) => [span.callId, s.advantages[span.start]!])))

  it("credits each turn with the rewards from that turn on, baselined per turn position", () => {
    const result = score(traces, { ...grpo, perTurn: true })
    const adv = byCall(result.samples)
    // turn 0: mean(1.75, 1) = 1.375; turn 1: mean(1.25, 1) = 1.125; turn 2: mean(1.25, 0) = 0.625
    expect(adv["a-c1"]).toBeCloseTo(0.375, 6)
    expect(adv["b-c1"]).toBeCloseTo(-0.375, 6)
    expect(adv["a-c2"]).toBeCloseTo(0.125, 6)
    expect(adv["b-c2"]).toBeCloseTo(-0.125, 6)
    expect(adv["a-c3"]).toBeCloseTo(0.625, 6)
  })

  it("ignores per-turn rewards when the option is off", () => {
    const adv = byCall(score(traces, grpo).samples)
    for (const id of ["a-c1", "a-c2", "a-c3"]) expect(adv[id]).toBeCloseTo(0.5, 6)
    for (const id of ["b-c1", "b-c2"]) expect(adv[id]).toBeCloseTo(-0.5, 6)
  })

  it("equals the rollout-level advantage when no per-turn reward was posted", () => {
    const plain = group("g", [1, 0, 0.5])
    expect(advantageOf(score(plain, { ...grpo, perTurn: true }).samples)).toEqual(advantageOf(score(plain, grpo).samples))
  })

  it("counts a per-turn reward on a call that is not in the attempt", () => {
    const t = [trace("a", "g", chain("a", [[10]]), [reward(1), reward(5, { callId: "nope" })]), ...group("h", [0])]
    const result = score([{ ...t[0]!, groupId: "g" }, { ...t[1]!, groupId: "g" }], { ...grpo, perTurn: true })
    expect(result.drops.count("reward-unmatched")).toBe(1)
    expect(advantageOf(result.samples)["a"]).toBeCloseTo(0.5, 6)
  })

  it("counts a per-turn reward on a failed call for the turns before it", () => {
    const c1 = call({ id: "x1", seq: 1, rolloutId: "x", prompt: [1], output: [5] })
    const failed = call({ id: "x2", seq: 2, rolloutId: "x", prompt: [1, 5, 7], output: [], status: 500 })
    const x = trace("x", "g", [c1, failed], [reward(0, { rolloutId: "x" }), reward(2, { callId: "x2" })])
    const y = trace("y", "g", chain("y", [[6]]), [reward(0, { rolloutId: "y" })])
    expect(byCall(score([x, y], { ...grpo, perTurn: true }).samples)).toEqual({ x1: 1, "y-c1": -1 })
  })
})

describe("buildBatch", () => {
  it("reports rewards, pass rate, usage, segment starts and drops for a batch", () => {
    const traces = [...group("g1", [1, 0, 0, 0]), ...group("g2", [1, 1]), trace("e", "g3", edited("e", [[1], [2]]), [reward(0.5)])]
    const batch = buildBatch(traces, { ...segmentOptions, ...grpo, passThreshold: 1 })
    expect(batch.reward.rollouts).toBe(7)
    expect(batch.reward.mean).toBeCloseTo(3.5 / 7, 6)
    expect(batch.reward.passRate).toBeCloseTo(3 / 7, 6)
    expect(batch.used).toMatchObject({ groups: 1, rollouts: 4, segments: 4, actionTokens: 8 })
    expect(batch.segmentStarts).toMatchObject({ first: 7, "history-edited": 1, branched: 0 })
    expect(batch.drops.count("group-zero-variance")).toBe(1)
    expect(batch.drops.count("group-too-small")).toBe(1)
  })
})
