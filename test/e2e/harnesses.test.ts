/**
 * End to end through both example harnesses, with real processes and the real Gateway: the calc
 * agent trains for two versions from the shipped base policy, and the mini-swe agent runs a group
 * on a tiny fresh policy. The pipeline's facts: rollouts are recorded with exact token chains
 * (each call's prompt extends the previous call's prompt and output), rewards come from the
 * verifier, samples are built, versions advance, and no harness ever saw an error.
 */
import { describe, expect, it } from "@effect/vitest"
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
import { Task } from "@reins/protocol"
import { Effect, Stream } from "effect"
import { readFileSync } from "node:fs"
import path from "node:path"
import { loadRunConfig, type TrainerEvent, trainerConfig } from "reins"
import { example, recorded, startReins, tempDir, tempRun } from "./run.js"

describe("end to end through the example harnesses", () => {
  it.scopedLive("calc: two versions from the shipped base policy", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { run } = yield* loadRunConfig(example("calc"))
      const events: Array<TrainerEvent> = []
      const reins = yield* startReins(tempRun(run, dir))
      yield* Effect.forkScoped(Stream.runForEach(reins.events, (e) => Effect.sync(() => void events.push(e))))
      const base = yield* reins.version
      const summary = yield* reins.train(trainerConfig({ batch_groups: 2, group_size: 6, async_groups: 2, max_versions: 2, lr: 3e-4, std_scaling: true, checkpoint_every: 0 }))
      expect(summary.versions).toBe(2)
      expect(yield* reins.version).toBe(base + 2)
      const versions = events.flatMap((e) => (e._tag === "Version" ? [e.metrics] : []))
      expect(versions.map((m) => m.version)).toEqual([base + 1, base + 2])
      for (const m of versions) expect(m.used.segments).toBeGreaterThan(0)

      const rollouts = yield* recorded(reins)
      const finished = rollouts.filter((r) => r.rollout.state === "succeeded")
      expect(finished.length).toBeGreaterThanOrEqual(2 * 2 * 6)
      for (const r of finished) {
        expect(r.rollout.reward === 0 || r.rollout.reward === 1).toBe(true)
        expect(r.chained).toBe(true)
      }
      // Tool-using rollouts made more than one call, and every call extended the chain exactly.
      expect(finished.some((r) => r.calls.length > 1)).toBe(true)
      for (const r of rollouts) if (r.rollout.state !== "cancelled") for (const c of r.calls) expect(c.status).toBe(200)
    }), 240_000)

  it.scopedLive("mini-swe: a group of real coding-agent rollouts is recorded and verified", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { run } = yield* loadRunConfig(example("mini-swe"))
      const model = path.join(dir, "model")
      const tokenizer = defaultTokenizer()
      yield* initModelDir(model, { tokenizer, config: defaultModelConfig(tokenizer.vocabSize, { dModel: 32, nLayers: 1, nHeads: 2, dFf: 64, contextLength: 1024 }) })
      const reins = yield* startReins(tempRun(run, dir, { model }))
      const line = JSON.parse(readFileSync(path.join(path.dirname(example("mini-swe")), "tasks", "test.jsonl"), "utf8").split("\n")[0]!)
      const { hidden_tests, ...rest } = line
      const group = yield* reins.stack.controller.submit({ task: new Task({ id: rest.id, input: rest.input }), taskExtra: { hidden_tests }, size: 3 })
      const ended = yield* reins.stack.controller.awaitGroup(group.groupId)
      expect(ended.map((e) => e.state)).toEqual(["succeeded", "succeeded", "succeeded"])
      // The verifier scored every rollout (an untrained policy fixes nothing: 0).
      for (const e of ended) expect(e.reward).toBe(0)
      const rollouts = yield* recorded(reins)
      for (const r of rollouts) {
        expect(r.calls.length).toBeGreaterThan(0)
        expect(r.chained).toBe(true)
        for (const c of r.calls) expect(c.status).toBe(200)
      }
    }), 240_000)
})
