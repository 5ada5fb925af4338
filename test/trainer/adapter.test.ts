import { Attempt, Rollout } from "@reins/protocol"
import { adaptRollout, type Segment, traceOf } from "@reins/trainer"
import { describe, expect, it } from "vitest"
import { call, chain, trace } from "./traces.js"

const chainMode = { mode: "chain" as const, maxTokens: 1024 }
const arr = (a: ArrayLike<number>) => Array.from(a)
const rounded = (a: ArrayLike<number>) => Array.from(a, (x) => Math.round(x * 1e4) / 1e4)

const only = (segments: ReadonlyArray<Segment>) => {
  expect(segments).toHaveLength(1)
  return segments[0]!
}

describe("sample adapter: chains", () => {
  it("turns a clean multi-turn chain into one segment with aligned masks, logprobs and versions", () => {
    const calls = chain("r1", [[10, 11], [12, 13, 14], [15]], { versions: [[3, 3], [4, 4, 5], [5]] })
    const { segments, drops } = adaptRollout(trace("r1", "g1", calls), chainMode)
    const s = only(segments)
    // system [1,2,3] · out 10 11 · obs 900 950 · out 12 13 14 · obs 901 951 · out 15
    expect(arr(s.tokens)).toEqual([1, 2, 3, 10, 11, 900, 950, 12, 13, 14, 901, 951, 15])
    expect(arr(s.lossMask)).toEqual([0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1])
    expect(rounded(s.behaviorLogprobs)).toEqual([0, 0, 0, -0.1, -0.2, 0, 0, -0.1, -0.2, -0.3, 0, 0, -0.1])
    expect(arr(s.versions)).toEqual([-1, -1, -1, 3, 3, -1, -1, 4, 4, 5, -1, -1, 5])
    expect(s.start).toBe("first")
    expect(s.actionTokens).toBe(6)
    expect(s.spans).toEqual([
      { callId: "r1-c1", turn: 0, start: 3, end: 5 },
      { callId: "r1-c2", turn: 1, start: 7, end: 10 },
      { callId: "r1-c3", turn: 2, start: 12, end: 13 }
    ])
    expect(s).toMatchObject({ rolloutId: "r1", groupId: "g1", attemptId: "a1", index: 0 })
    const counts = drops.snapshot()
    expect(Object.values(counts).every((d) => d.count === 0)).toBe(true)
  })

  it("orders calls by seq whatever order they arrive in", () => {
    const calls = chain("r1", [[10], [11], [12]])
    const { segments } = adaptRollout(trace("r1", "g1", [calls[2]!, calls[0]!, calls[1]!]), chainMode)
    expect(only(segments).spans.map((s) => s.callId)).toEqual(["r1-c1", "r1-c2", "r1-c3"])
  })

  it("starts a new segment with the Gateway's reason when the history was edited", () => {
    const [c1, c2] = chain("r1", [[10, 11], [12]])
    // The harness rewrote its first message: the prompt no longer starts with call 1's ids.
    const c3 = call({ id: "r1-c3", seq: 3, prompt: [1, 2, 77, 10, 11, 900, 950, 12, 5], output: [13, 14], break: "history-edited" })
    const { segments } = adaptRollout(trace("r1", "g1", [c1!, c2!, c3]), chainMode)
    expect(segments).toHaveLength(2)
    expect(segments.map((s) => s.start)).toEqual(["first", "history-edited"])
    expect(segments.map((s) => s.index)).toEqual([0, 1])
    // The new segment's prompt is all observation, even the tokens the model once produced.
    expect(arr(segments[1]!.lossMask)).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    expect(segments[1]!.actionTokens).toBe(2)
    expect(segments[0]!.actionTokens).toBe(3)
  })

  it("keeps the Gateway's other reasons, and classifies breaks it did not", () => {
    const c1 = call({ id: "c1", seq: 1, prompt: [1, 2], output: [10] })
    const c2 = call({ id: "c2", seq: 2, prompt: [1, 3], output: [11], break: "template" })
    // Reused call 1's prompt (a retry of the same request): a branch from inside the chain.
    const c3 = call({ id: "c3", seq: 3, prompt: [1, 2], output: [12], fromCallId: "c1" })
    // No reuse record at all: taken as edited.
    const c4 = call({ id: "c4", seq: 4, prompt: [5, 6], output: [13] })
    const { segments } = adaptRollout(trace("r1", "g1", [c1, c2, c3, c4]), chainMode)
    expect(segments.map((s) => s.start)).toEqual(["first", "template", "branched", "history-edited"])
  })

  it("extends the segment a call continues even when another conversation came in between", () => {
    // A main agent (A) and a sub-agent (B) interleave their calls in one attempt.
    const a1 = call({ id: "a1", seq: 1, prompt: [1, 2], output: [10] })
    const b1 = call({ id: "b1", seq: 2, prompt: [7, 8], output: [20], break: "history-edited" })
    const a2 = call({ id: "a2", seq: 3, prompt: [1, 2, 10, 3], output: [11], fromCallId: "a1" })
    const { segments } = adaptRollout(trace("r1", "g1", [a1, b1, a2]), chainMode)
    expect(segments).toHaveLength(2)
    expect(arr(segments[0]!.tokens)).toEqual([1, 2, 10, 3, 11])
    expect(arr(segments[0]!.lossMask)).toEqual([0, 0, 1, 0, 1])
    expect(arr(segments[1]!.tokens)).toEqual([7, 8, 20])
  })

  it("makes one segment per call in per-call mode", () => {
    const calls = chain("r1", [[10, 11], [12], [13, 14]])
    const { segments } = adaptRollout(trace("r1", "g1", calls), { mode: "per-call", maxTokens: 1024 })
    expect(segments.map((s) => s.start)).toEqual(["first", "per-call", "per-call"])
    expect(arr(segments[1]!.tokens)).toEqual([1, 2, 3, 10, 11, 900, 950, 12])
    expect(arr(segments[1]!.lossMask)).toEqual([0, 0, 0, 0, 0, 0, 0, 1])
    expect(segments.map((s) => s.actionTokens)).toEqual([2, 1, 2])
    expect(segments.map((s) => s.spans[0]!.turn)).toEqual([0, 1, 2])
  })
})

describe("sample adapter: nothing dropped silently", () => {
  it("drops a call whose prompt exceeds the context, and counts it", () => {
    const long = Array.from({ length: 20 }, (_, i) => i + 1)
    const c1 = call({ id: "c1", seq: 1, prompt: long, output: [50, 51, 52] })
    const { segments, drops } = adaptRollout(trace("r1", "g1", [c1]), { mode: "chain", maxTokens: 16 })
    expect(segments).toHaveLength(0)
    expect(drops.count("prompt-overlong")).toBe(1)
    expect(drops.actionTokens("prompt-overlong")).toBe(3)
    // Not counted a second time as an empty segment.
    expect(drops.count("segment-empty")).toBe(0)
  })

  it("truncates a response at the context, counts it, and drops the rest of the chain", () => {
    // c1: 3 + 2 = 5 tokens; c2: prompt 7, 3 outputs, only 1 fits in 8; c3's prompt (11) is over.
    const calls = chain("r1", [[10, 11], [12, 13, 14], [15]])
    const { segments, drops } = adaptRollout(trace("r1", "g1", calls), { mode: "chain", maxTokens: 8 })
    const s = only(segments)
    expect(arr(s.tokens)).toEqual([1, 2, 3, 10, 11, 900, 950, 12])
    expect(arr(s.lossMask)).toEqual([0, 0, 0, 1, 1, 0, 0, 1])
    expect(rounded(s.behaviorLogprobs.subarray(7))).toEqual([-0.1])
    expect(s.spans.map((x) => [x.callId, x.start, x.end])).toEqual([
      ["r1-c1", 3, 5],
      ["r1-c2", 7, 8]
    ])
    expect(drops.snapshot()["response-truncated"]).toMatchObject({ count: 1, actionTokens: 2 })
    expect(drops.snapshot()["prompt-overlong"]).toMatchObject({ count: 1, actionTokens: 1 })
  })

  it("counts failed, untrainable and malformed calls by reason, and keeps chaining past them", () => {
    const [c1, c2] = chain("r1", [[10], [11]])
    const failed = call({ id: "f", seq: 2, prompt: [1, 2, 3, 10, 900, 950], output: [], status: 500 })
    const untrainable = call({ id: "u", seq: 3, prompt: [4], output: [1, 2], trainable: false })
    const malformed = call({ id: "m", seq: 4, prompt: [5], output: [1, 2], logprobs: [-1] })
    const moved = call({ id: "r1-c2", seq: 5, prompt: Array.from(c2!.promptIds), output: [11], fromCallId: "r1-c1" })
    const { segments, drops } = adaptRollout(trace("r1", "g1", [c1!, failed, untrainable, malformed, moved]), chainMode)
    const s = only(segments)
    expect(s.actionTokens).toBe(2)
    // Turn positions count successful calls: the failed one is not a turn.
    expect(s.spans.map((x) => x.turn)).toEqual([0, 3])
    expect(drops.count("call-failed")).toBe(1)
    expect(drops.count("call-untrainable")).toBe(1)
    expect(drops.actionTokens("call-untrainable")).toBe(2)
    expect(drops.count("call-malformed")).toBe(1)
  })

  it("counts a segment without response tokens", () => {
    const c1 = call({ id: "c1", seq: 1, prompt: [1, 2], output: [] })
    const { segments, drops } = adaptRollout(trace("r1", "g1", [c1]), chainMode)
    expect(segments).toHaveLength(0)
    expect(drops.count("segment-empty")).toBe(1)
  })

  it("traces the latest attempt of a rollout and counts the calls of earlier ones", () => {
    const rollout = new Rollout({ id: "r1", task: {}, group: "g7", state: "succeeded", attempts: 2, reward: 1, createdAt: 0, updatedAt: 0 })
    const attempt = (id: string, index: number) =>
      new Attempt({ id, rolloutId: "r1", index, state: index === 0 ? "failed" : "succeeded", reason: null, createdAt: 0, startedAt: 0, finishedAt: 0 })
    const old = call({ id: "old", seq: 1, prompt: [1], output: [5, 6, 7], attemptId: "a0" })
    const now = call({ id: "new", seq: 1, prompt: [1], output: [8], attemptId: "a1" })
    const t = traceOf({ rollout, attempts: [attempt("a0", 0), attempt("a1", 1)], calls: [old, now], rewards: [] })
    expect(t).toMatchObject({ rolloutId: "r1", groupId: "g7", attemptId: "a1", superseded: { calls: 1, actionTokens: 3 } })
    expect(t.calls.map((c) => c.id)).toEqual(["new"])
    const { drops } = adaptRollout(t, chainMode)
    expect(drops.snapshot()["call-superseded"]).toMatchObject({ count: 1, actionTokens: 3 })
  })
})
