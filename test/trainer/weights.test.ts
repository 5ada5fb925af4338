import {
  buildBatch,
  normalize,
  planUpdate,
  type ScoredSegment,
  splitSteps,
  staleness,
  truncatedImportance,
  weightByRollout
} from "@reins/trainer"
import { describe, expect, it } from "vitest"
import { chain, edited, reward, sum, trace } from "./traces.js"

/** A scored segment with `actions` action tokens after `prompt` prompt tokens. */
const segment = (rolloutId: string, actions: number, fields: { groupId?: string; prompt?: number; index?: number } = {}): ScoredSegment => {
  const prompt = fields.prompt ?? 2
  const length = prompt + actions
  const lossMask = new Uint8Array(length).fill(1, prompt)
  return {
    rolloutId,
    groupId: fields.groupId ?? "g",
    attemptId: "a",
    index: fields.index ?? 0,
    start: "first",
    tokens: new Int32Array(length),
    lossMask,
    behaviorLogprobs: new Float32Array(length),
    versions: new Int32Array(length).fill(1, prompt),
    spans: [{ callId: "c", turn: 0, start: prompt, end: length }],
    actionTokens: actions,
    advantages: new Float32Array(length).fill(1, prompt)
  }
}

// Rollout A: one segment of 4 action tokens. Rollout B: five segments of 2 action tokens.
const a = segment("A", 4)
const b = [0, 1, 2, 3, 4].map((i) => segment("B", 2, { index: i }))
const batch = [a, ...b]

const tokenWeights = (s: { weights: Float32Array; lossMask: Uint8Array }) => Array.from(s.weights).filter((_, i) => s.lossMask[i] === 1)

describe("loss normalization (checked by hand)", () => {
  it("rollout: every rollout weighs 1/N, however many segments it has", () => {
    const samples = normalize(batch, "rollout")
    // N = 2; A: 1/(2·4) per token; B: 1/(2·10) per token
    expect(tokenWeights(samples[0]!)).toEqual(new Array(4).fill(Math.fround(1 / 8)))
    expect(tokenWeights(samples[1]!)).toEqual(new Array(2).fill(Math.fround(1 / 20)))
    const byRollout = weightByRollout(samples)
    expect(byRollout.get("A")).toBeCloseTo(0.5, 6)
    expect(byRollout.get("B")).toBeCloseTo(0.5, 6)
    // Weights are zero off the action tokens: they double as the loss mask.
    expect(Array.from(samples[0]!.weights.subarray(0, 2))).toEqual([0, 0])
  })

  it("token: every action token weighs 1/T (DAPO)", () => {
    const samples = normalize(batch, "token")
    for (const s of samples) expect(tokenWeights(s)).toEqual(new Array(s.actionTokens).fill(Math.fround(1 / 14)))
    const byRollout = weightByRollout(samples)
    expect(byRollout.get("A")).toBeCloseTo(4 / 14, 6)
    expect(byRollout.get("B")).toBeCloseTo(10 / 14, 6)
  })

  it("sequence: every segment weighs 1/M", () => {
    const samples = normalize(batch, "sequence")
    // M = 6; A's tokens 1/(6·4), each B segment's tokens 1/(6·2)
    expect(tokenWeights(samples[0]!)).toEqual(new Array(4).fill(Math.fround(1 / 24)))
    expect(tokenWeights(samples[3]!)).toEqual(new Array(2).fill(Math.fround(1 / 12)))
    expect(weightByRollout(samples).get("A")).toBeCloseTo(1 / 6, 6)
    expect(weightByRollout(samples).get("B")).toBeCloseTo(5 / 6, 6)
  })

  it("sums to 1 in every mode", () => {
    for (const mode of ["rollout", "token", "sequence"] as const) {
      const total = normalize(batch, mode).reduce((n, s) => n + sum(s.weights), 0)
      expect(total).toBeCloseTo(1, 5)
    }
  })

  it("a rollout split into 5 segments weighs the same as one of 1 segment (rollout mode, from traces)", () => {
    const outputs = [[10, 11], [12], [13, 14, 15], [16], [17, 18]]
    const whole = trace("whole", "g", chain("whole", outputs), [reward(1)])
    const split = trace("split", "g", edited("split", outputs), [reward(0)])
    const built = buildBatch([whole, split], {
      mode: "chain",
      maxTokens: 1024,
      estimator: "grpo",
      stdScaling: false,
      perTurn: false,
      missingReward: "drop",
      passThreshold: 1
    })
    expect(built.samples.filter((s) => s.rolloutId === "whole")).toHaveLength(1)
    expect(built.samples.filter((s) => s.rolloutId === "split")).toHaveLength(5)
    const [step] = planUpdate(built.samples, { optimizerSteps: 1, normalization: "rollout" })
    const byRollout = weightByRollout(step!)
    expect(byRollout.get("whole")).toBeCloseTo(0.5, 6)
    expect(byRollout.get("split")).toBeCloseTo(0.5, 6)
    // Under `sequence` the split rollout would count five times as much.
    const bySequence = weightByRollout(normalize(built.samples, "sequence"))
    expect(bySequence.get("split")! / bySequence.get("whole")!).toBeCloseTo(5, 5)
  })
})

describe("optimizer steps", () => {
  it("splits a batch into optimizer steps by whole groups and normalizes each step", () => {
    const samples = [
      segment("r1", 8, { groupId: "big" }),
      segment("r2", 8, { groupId: "big" }),
      segment("r3", 4, { groupId: "mid" }),
      segment("r4", 4, { groupId: "small" }),
      segment("r5", 2, { groupId: "small" })
    ]
    const parts = splitSteps(samples, 2)
    expect(parts.map((p) => p.map((s) => s.rolloutId))).toEqual([["r1", "r2"], ["r3", "r4", "r5"]])
    const steps = planUpdate(samples, { optimizerSteps: 2, normalization: "rollout" })
    for (const step of steps) expect(step.reduce((n, s) => n + sum(s.weights), 0)).toBeCloseTo(1, 5)
    // More steps than groups: no empty steps.
    expect(splitSteps(samples, 10)).toHaveLength(3)
  })
})

describe("off-policy", () => {
  it("histograms staleness of action tokens only", () => {
    const s1 = segment("A", 4)
    s1.versions.set([5, 5, 4, 2], 2)
    const s2 = segment("B", 2)
    s2.versions.set([6, 7], 2) // 7 is newer than the trainer: counted, not binned
    const stats = staleness([s1, s2], 6)
    expect(stats.histogram).toEqual([1, 2, 1, 0, 1])
    expect(stats.max).toBe(4)
    expect(stats.mean).toBeCloseTo((0 + 1 + 1 + 2 + 4) / 5, 6)
    expect(stats.future).toBe(1)
    expect(staleness([], 3)).toMatchObject({ histogram: [], max: 0, mean: null })
  })

  it("truncates importance weights at the cap", () => {
    const current = Float32Array.from([0, Math.log(0.8), Math.log(0.5), Math.log(0.3)])
    const behavior = Float32Array.from([0, Math.log(0.5), Math.log(0.1), Math.log(0.3)])
    const mask = Uint8Array.from([0, 1, 1, 1])
    const { weights, stats } = truncatedImportance(current, behavior, mask, 2)
    expect(weights[0]).toBe(0)
    expect(weights[1]).toBeCloseTo(1.6, 5)
    expect(weights[2]).toBe(2) // ratio 5, capped
    expect(weights[3]).toBeCloseTo(1, 6)
    expect(stats.tokens).toBe(3)
    expect(stats.truncatedFraction).toBeCloseTo(1 / 3, 6)
    expect(stats.maxRatio).toBeCloseTo(5, 4)
    expect(stats.mean).toBeCloseTo((1.6 + 2 + 1) / 3, 5)
    expect(() => truncatedImportance(current, behavior.subarray(1), mask, 2)).toThrow(RangeError)
  })
})
