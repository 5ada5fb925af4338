/**
 * End to end through both example harnesses, with real processes and the real Gateway: the calc
 * agent trains for two versions from the shipped base policy, and the mini-swe agent runs a group
 * on a tiny fresh policy. The pipeline's facts: rollouts are recorded with exact token chains
 * (each call's prompt extends the previous call's prompt and output), rewards come from the
 * verifier, samples are built, versions advance, and no harness ever saw an error.
 */
import { describe, expect, it } from "@effect/vitest"
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
import { HarnessSpec, Task, VerifierSpec } from "@reins/protocol"
import { Context, Effect, Layer, Stream } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { EvalConfig, loadRunConfig, Reins, RunConfig, type TrainerEvent, trainerConfig } from "reins"

const example = (name: string) => fileURLToPath(new URL(`../../examples/${name}/reins.config.json`, import.meta.url))

/**
 * The example's run in temp folders. Its processes run at niceness 0 rather than the launcher's
 * default 19: a test shares the machine with other work, and at 19 the harnesses starve into
 * their timeouts (a run's own harnesses and the device compete fairly either way).
 */
const tempRun = (run: RunConfig, dir: string, fields: Partial<ConstructorParameters<typeof RunConfig>[0]> = {}) =>
  new RunConfig({
    ...run,
    harness: new HarnessSpec({ ...run.harness, nice: 0, ...(run.harness.verifier === undefined ? {} : { verifier: new VerifierSpec({ ...run.harness.verifier, nice: 0 }) }) }),
    runs_dir: path.join(dir, "runs"),
    data_dir: path.join(dir, "data"),
    concurrency: 8,
    eval: new EvalConfig({ ...run.eval, enabled: false }),
    ...fields
  })

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(path.join(os.tmpdir(), "reins-e2e-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/** The stack, alive for the rest of the test's scope. */
const startReins = (run: RunConfig) => Effect.map(Layer.build(Reins.local({ run })), (context) => Context.get(context, Reins.Reins))

/** Every rollout's calls: statuses, and whether each call's prompt extends the one before. */
const recorded = (reins: Reins.ReinsService) =>
  Effect.gen(function*() {
    const page = yield* reins.stack.store.rollouts({ limit: 1000 })
    return yield* Effect.forEach(page.rollouts, (r) =>
      Effect.map(reins.stack.store.rollout(r.id), (d) => {
        const calls = [...d.calls].sort((a, b) => a.seq - b.seq)
        const chained = calls.every((c, i) => {
          if (i === 0) return true
          const before = [...calls[i - 1]!.promptIds, ...calls[i - 1]!.outputIds]
          return before.every((t, j) => c.promptIds[j] === t)
        })
        return { rollout: r, calls, chained }
      }))
  })

describe("end to end through the example harnesses", () => {
  it.scopedLive("calc: two versions from the shipped base policy", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { run } = yield* loadRunConfig(example("calc"))
      const events: Array<TrainerEvent> = []
      const reins = yield* startReins(tempRun(run, dir))
      yield* Effect.forkScoped(Stream.runForEach(reins.events, (e) => Effect.sync(() => void events.push(e))))
      const base = yield* reins.version
      const summary = yield* reins.train(trainerConfig({ batch_groups: 2, group_size: 6, async_groups: 3, max_versions: 2, lr: 3e-4, std_scaling: true, checkpoint_every: 0 }))
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
