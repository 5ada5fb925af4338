/**
 * End to end through a harness that speaks Anthropic Messages: the calc agent written with the
 * official `@anthropic-ai/sdk` and a `tool_use` / `tool_result` loop
 * (examples/calc/anthropic-harness.mjs), started by reins's local launcher with the
 * ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY it sets, trains for two versions from the shipped calc
 * base. Every call is recorded as a Messages call with exact token chains across the tool turns,
 * the verifier's reward is the answer the harness got from the recorded replies, samples are
 * built, versions advance, and no harness saw an error.
 */
import { describe, expect, it } from "@effect/vitest"
import { isContextFull, isHarnessError } from "@reins/protocol"
import { Effect, Stream } from "effect"
import { loadRunConfig, type TrainerEvent, trainerConfig } from "reins"
import { extractAnswer } from "../../examples/calc/agent.mjs"
import { evaluate } from "../../examples/calc/calculator.mjs"
import { example, recorded, startReins, tempDir, tempRun } from "./run.js"

type Json = Record<string, any>

/** What the harness answered, read from its recorded calls as the harness reads the replies. */
const answerOf = (calls: ReadonlyArray<{ readonly status: number; readonly response: unknown }>): string => {
  const last = calls.at(-1)
  if (last === undefined || last.status !== 200) return "" // no call, or the context filled up
  const blocks = ((last.response as Json).content ?? []) as Array<Json>
  if (blocks.some((b) => b.type === "tool_use")) return "" // the turn limit ended it mid-loop
  return extractAnswer(blocks.filter((b) => b.type === "text").map((b) => b.text).join(""))
}

describe("end to end through a Messages-speaking harness", () => {
  it.scopedLive("calc over Anthropic Messages (the SDK's tool loop): two versions from the shipped base policy", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { run } = yield* loadRunConfig(example("calc"))
      const events: Array<TrainerEvent> = []
      const reins = yield* startReins(tempRun(run, dir, {}, { command: ["node", "anthropic-harness.mjs"] }))
      yield* Effect.forkScoped(Stream.runForEach(reins.events, (e) => Effect.sync(() => void events.push(e))))
      const base = yield* reins.version
      const summary = yield* reins.train(trainerConfig({ batch_groups: 2, group_size: 6, async_groups: 2, max_versions: 2, lr: 3e-4, std_scaling: true, checkpoint_every: 0 }))
      expect(summary.versions).toBe(2)
      expect(yield* reins.version).toBe(base + 2)
      const versions = events.flatMap((e) => (e._tag === "Version" ? [e.metrics] : []))
      expect(versions.map((m) => m.version)).toEqual([base + 1, base + 2])
      for (const m of versions) expect(m.used.segments).toBeGreaterThan(0)

      const rollouts = yield* recorded(reins)
      // No harness error: no rollout failed (the harness exits 1 on any server error), and no
      // recorded call failed except at the model's context limit (an episode's legitimate end).
      expect(rollouts.filter((r) => r.rollout.state === "failed")).toEqual([])
      expect((yield* reins.stack.store.failedCalls).filter(isHarnessError)).toEqual([])
      const finished = rollouts.filter((r) => r.rollout.state === "succeeded")
      expect(finished.length).toBeGreaterThanOrEqual(2 * 2 * 6)

      const detail = yield* Effect.forEach(finished, (r) => reins.stack.store.rollout(r.rollout.id))
      for (const [i, r] of finished.entries()) {
        // Every call spoke Messages (the protocol column), and the prompts chain exactly.
        expect(r.calls.length).toBeGreaterThan(0)
        for (const c of r.calls) {
          expect({ endpoint: c.endpoint, protocol: c.protocol }).toEqual({ endpoint: "messages", protocol: "anthropic" })
          expect(c.status === 200 || isContextFull(c)).toBe(true)
        }
        expect(r.chained).toBe(true)
        // The verifier's reward is the harness's answer scored against the task.
        const rewards = detail[i]!.rewards.filter((w) => w.callId === null)
        expect(rewards.map((w) => (w.info as Json).source)).toEqual(["verifier"])
        const answer = answerOf(r.calls)
        const expected = evaluate((r.rollout.task as Json).input.question)
        expect(r.rollout.reward).toBe(answer !== "" && Math.abs(Number(answer) - expected) < 1e-6 ? 1 : 0)
      }

      // The tool loop ran: calls after a tool_use sent back its tool_result by id, and each such
      // call's prompt reused the whole previous call (prompt + output) as its exact ids.
      const toolTurns = finished.flatMap((r) => r.calls.slice(1).map((c, k) => ({ before: r.calls[k]!, call: c })))
      expect(toolTurns.length).toBeGreaterThan(0)
      for (const { before, call } of toolTurns) {
        const uses = ((before.response as Json).content as Array<Json>).filter((b) => b.type === "tool_use")
        expect(uses.length).toBeGreaterThan(0)
        const messages = (call.request as Json).messages as Array<Json>
        expect(messages.at(-2)).toEqual({ role: "assistant", content: (before.response as Json).content })
        expect(messages.at(-1)!.content.map((b: Json) => [b.type, b.tool_use_id])).toEqual(uses.map((u) => ["tool_result", u.id]))
        if (call.status === 200) {
          expect(call.reuse).toMatchObject({ reusedTokens: before.promptIds.length + before.outputIds.length, fromCallId: before.id, break: null })
        }
      }
      expect(finished.some((r) => r.rollout.reward === 1)).toBe(true)

      // What each update trained, as the Trainer recorded it per call: GRPO advantages with std
      // scaling over each group's rewards, and rollout-normalized weights (every trained rollout
      // weighs 1/N of its update, N the rollouts it trained; the update's weights sum to 1).
      const trained = (yield* Effect.forEach(rollouts, (r) => reins.stack.store.trainedCalls(r.rollout.id))).flat()
      expect(new Set(trained.map((t) => t.version))).toEqual(new Set([base + 1, base + 2]))
      const callsById = new Map(rollouts.flatMap((r) => r.calls.map((c) => [c.id, c] as const)))
      for (const t of trained) {
        expect(t.tokens).toBeGreaterThan(0)
        expect(t.tokens).toBeLessThanOrEqual(callsById.get(t.callId)!.outputIds.length)
      }
      for (const version of [base + 1, base + 2]) {
        const rows = trained.filter((t) => t.version === version)
        const byRollout = new Map<string, Array<(typeof rows)[number]>>()
        for (const t of rows) byRollout.set(t.rolloutId, [...(byRollout.get(t.rolloutId) ?? []), t])
        for (const [rolloutId, own] of byRollout) {
          expect(own.reduce((sum, t) => sum + t.weight * t.tokens, 0)).toBeCloseTo(1 / byRollout.size, 5)
          const rollout = rollouts.find((r) => r.rollout.id === rolloutId)!.rollout
          const group = rollouts.map((r) => r.rollout).filter((r) => r.group === rollout.group && r.reward !== null).map((r) => r.reward!)
          const mean = group.reduce((a, b) => a + b, 0) / group.length
          const std = Math.sqrt(group.reduce((a, b) => a + (b - mean) ** 2, 0) / (group.length - 1))
          for (const t of own) expect(t.advantage).toBeCloseTo((rollout.reward! - mean) / (std + 1e-6), 4)
        }
      }
    }), 300_000)
})
