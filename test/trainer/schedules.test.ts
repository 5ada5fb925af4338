/**
 * The schedules end to end with real parts: a tiny policy in a device worker thread, the real
 * Gateway on loopback with its SQLite store, the Rollout Controller launching a real openai-SDK
 * agent process per rollout, a verifier process, and the Trainer's run loop. The assertions are
 * the protocol invariants of the issue: no harness call ever fails, per-call token versions never
 * go back, every rollout is trained at most once (carried-over ones included), and admission keeps
 * staleness within the bound.
 */
import { describe, expect, it } from "@effect/vitest"
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
import { HarnessSpec, type TrainerConfig, VerifierSpec } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { latestCheckpoint, readJsonl, runTraining, type TrainerEvent, trainerConfig } from "@reins/trainer"
import { VersionMetrics } from "@reins/protocol"
import { localStack } from "reins"
import { Effect, Option, PubSub, Queue, Schedule } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createRequire, syncBuiltinESMExports } from "node:module"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Task as TaskClass } from "@reins/protocol"

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url))

// Niceness 0, not the launcher's default 19: the agents must keep pace with the Trainer (the t0
// agents wait a bounded time for an update) while another test file computes beside this one.
const harness = (env: Record<string, string>, slotsDir: string) => new HarnessSpec({
  command: [process.execPath, fixture("agent.mjs")],
  env,
  timeout_s: 60,
  grace_s: 1,
  nice: 0,
  verifier: new VerifierSpec({ command: [process.execPath, fixture("verifier.mjs")], env: { ...env, VERIFIER_SLOTS_DIR: slotsDir }, timeout_s: 20, nice: 0 })
})

/** A source of `n` distinct tasks. */
const tasks = (n: number) => {
  let next = 0
  return {
    next: Effect.sync(() => (next < n ? Option.some({ task: new TaskClass({ id: `t${next++}`, input: { n: next } }) }) : Option.none())),
    position: Effect.sync(() => next)
  }
}

/** A tiny policy in a device worker, the local stack around it, and the run's event stream. */
const setupRun = (config: TrainerConfig, agentEnv: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-schedules-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
    const modelDir = path.join(dir, "model")
    const tokenizer = defaultTokenizer()
    yield* initModelDir(modelDir, {
      tokenizer,
      config: defaultModelConfig(tokenizer.vocabSize, { dModel: 32, nLayers: 1, nHeads: 2, dFf: 64, contextLength: 256 })
    })
    const stack = yield* localStack({ modelDir, dataDir: path.join(dir, "data"), harness: harness(agentEnv, dir), concurrency: 6, split: config.schedule === "split" })
    const events = yield* PubSub.unbounded<TrainerEvent>()
    const seen = yield* PubSub.subscribe(events)
    const run = runTraining({ config, ports: { ...stack.ports, tasks: tasks(40) }, runDir: path.join(dir, "run"), events })
    return { stack, seen, run, runDir: path.join(dir, "run") }
  })

const withRun = <A>(config: TrainerConfig, body: (run: RunResult) => Effect.Effect<A, unknown>, agentEnv: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const { stack, seen, run, runDir } = yield* setupRun(config, agentEnv)
    const summary = yield* run
    const all = yield* Queue.takeAll(seen)
    const metrics = yield* readJsonl(path.join(runDir, "metrics.jsonl"), VersionMetrics)
    return yield* body({ stack, summary, events: [...all], metrics, runDir })
  }).pipe(Effect.provide(ActorSystem.layerLocal()))

/**
 * Worker threads started while in scope, with their entry module: the test ends one to crash a
 * device. Node's builtin module is patched for the scope's duration (and restored after).
 */
const trackedWorkerThreads = Effect.acquireRelease(
  Effect.sync(() => {
    const workerThreads = createRequire(import.meta.url)("node:worker_threads") as typeof import("node:worker_threads")
    const Original = workerThreads.Worker
    const threads: Array<{ readonly entry: string; readonly thread: InstanceType<typeof Original> }> = []
    workerThreads.Worker = class extends Original {
      constructor(...args: ConstructorParameters<typeof Original>) {
        super(...args)
        threads.push({ entry: JSON.stringify(args[1]?.workerData ?? null), thread: this })
      }
    }
    syncBuiltinESMExports()
    return { threads, restore: () => { workerThreads.Worker = Original; syncBuiltinESMExports() } }
  }),
  ({ restore }) => Effect.sync(restore)
).pipe(Effect.map(({ threads }) => threads))

interface RunResult {
  readonly stack: Effect.Effect.Success<ReturnType<typeof localStack>>
  readonly summary: Effect.Effect.Success<ReturnType<typeof runTraining>>
  readonly events: ReadonlyArray<TrainerEvent>
  readonly metrics: ReadonlyArray<VersionMetrics>
  readonly runDir: string
}

/** Every recorded call of every rollout: status and token versions, in order. */
const recordedCalls = (run: RunResult) =>
  Effect.gen(function*() {
    const page = yield* run.stack.store.rollouts({ limit: 1000 })
    const out: Array<{ rolloutId: string; state: string; calls: Array<{ status: number; versions: Int32Array }> }> = []
    for (const r of page.rollouts) {
      const detail = yield* run.stack.store.rollout(r.id)
      out.push({ rolloutId: r.id, state: r.state, calls: [...detail.calls].sort((a, b) => a.seq - b.seq).map((c) => ({ status: c.status, versions: c.versions })) })
    }
    return out
  })

const trainedRollouts = (events: ReadonlyArray<TrainerEvent>) => events.flatMap((e) => (e._tag === "Version" ? e.rolloutIds : []))

const checkInvariants = (run: RunResult, maxStaleness: number) =>
  Effect.gen(function*() {
    const rollouts = yield* recordedCalls(run)
    // No harness call ever failed: a pause only delays calls. (Rollouts still running when the run
    // ended were cancelled: their last call was cut off by the cancel, a 499.)
    for (const r of rollouts) {
      if (r.state === "cancelled") continue
      for (const c of r.calls) expect(c.status, `a call of ${r.rolloutId}`).toBe(200)
    }
    // ... and no trained rollout failed.
    const trained = trainedRollouts(run.events)
    const byId = new Map(rollouts.map((r) => [r.rolloutId, r]))
    for (const id of trained) expect(byId.get(id)?.state).toBe("succeeded")
    // Versions per rollout never go back: no token was sampled by an old version after an update.
    let carriedOver = 0
    for (const r of rollouts) {
      const versions = r.calls.flatMap((c) => [...c.versions])
      for (let i = 1; i < versions.length; i++) expect(versions[i]!).toBeGreaterThanOrEqual(versions[i - 1]!)
      if (trained.includes(r.rolloutId) && new Set(versions).size > 1) carriedOver++
    }
    // Trained once, carried-over rollouts included.
    expect(new Set(trained).size).toBe(trained.length)
    for (const m of run.metrics) expect(m.staleness.max).toBeLessThanOrEqual(maxStaleness)
    return { carriedOver, trained: trained.length }
  })

describe("training schedules with real processes", () => {
  it.scopedLive("collocated: updates while rollouts run; nothing fails, nothing is trained twice, staleness bounded", () =>
    withRun(
      trainerConfig({
        schedule: "collocated",
        batch_groups: 2,
        group_size: 3,
        async_groups: 4,
        max_staleness: 1,
        max_versions: 4,
        checkpoint_every: 2,
        lr: 1e-3,
        micro_batch_tokens: 2048
      }),
      (run) =>
        Effect.gen(function*() {
          expect(run.summary.versions).toBe(4)
          expect(run.metrics.map((m) => m.version)).toEqual([1, 2, 3, 4])
          const { carriedOver, trained } = yield* checkInvariants(run, 1)
          expect(trained).toBeGreaterThanOrEqual(4 * 2 * 3 - 6)
          // Some rollouts ran across an update and carry tokens of two versions (the agents of
          // task t0 wait for one).
          expect(carriedOver).toBeGreaterThan(0)
          for (const m of run.metrics) {
            expect(m.pause.pauseSeconds).toBeGreaterThan(0)
            expect(m.device.generating + m.device.training + m.device.idle).toBeCloseTo(1, 5)
            expect(m.device.training).toBeGreaterThan(0)
          }
          const latest = yield* latestCheckpoint(path.join(run.runDir, "checkpoints"))
          expect(latest?.cursor.version).toBe(4)
          // The Gateway serves the newest version, and each resume recorded the version it serves.
          expect((yield* run.stack.gateway.state).version).toBe(4)
          expect((yield* run.stack.store.modelVersions).map((v) => v.version)).toEqual([0, 1, 2, 3, 4])
        }),
      { AGENT_WAIT_FOR_VERSION: "1" }
    ), 120_000)

  // One sync run checks both the schedule (every version trains only tokens of the version
  // before it) and dynamic sampling on top of it.
  it.scopedLive("sync with dynamic sampling: every version trains only tokens of the version before it; groups whose rollouts all got one reward are replaced, so every update trains batch_groups groups with a signal", () =>
    withRun(
      trainerConfig({ schedule: "sync", batch_groups: 2, group_size: 3, max_versions: 3, checkpoint_every: 0, lr: 1e-3, dynamic_sampling: true }),
      (run) =>
        Effect.gen(function*() {
          expect(run.summary.versions).toBe(3)
          yield* checkInvariants(run, 0)
          expect(run.metrics).toHaveLength(3)
          for (const m of run.metrics) expect(m.staleness.histogram.slice(1).every((n) => n === 0)).toBe(true)
          const rollouts = (yield* run.stack.store.rollouts({ limit: 1000 })).rollouts
          const trained = new Set(trainedRollouts(run.events))
          const groups = new Map<string, Array<number | null>>()
          for (const r of rollouts) if (trained.has(r.id)) groups.set(r.group!, [...(groups.get(r.group!) ?? []), r.reward])
          // every update trained two groups, each with rewards that differ; none of the constant tasks
          expect(run.metrics.map((m) => m.used.groups)).toEqual([2, 2, 2])
          expect(groups.size).toBe(6)
          for (const [group, rewards] of groups) {
            expect(new Set(rewards).size, group).toBeGreaterThan(1)
            expect(group).not.toMatch(/\.t[124]$/)
          }
          // the dropped groups are counted: at least the three constant tasks (parity rewards can be equal too)
          const dropped = run.metrics.reduce((n, m) => n + m.drops["group-zero-variance"].count, 0)
          expect(dropped).toBeGreaterThanOrEqual(3)
          expect(run.summary.consumedGroups).toBe(6 + dropped)
        }),
      { VERIFIER_CONSTANT_TASKS: "t1,t2,t4" }
    ), 120_000)

  it.scopedLive("a device worker that dies between updates stops the run with a clear error instead of training on from the base", () =>
    Effect.gen(function*() {
      const threads = yield* trackedWorkerThreads
      // Agents call only while the go file exists.
      const go = path.join(mkdtempSync(path.join(os.tmpdir(), "reins-restart-")), "go")
      writeFileSync(go, "")
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(path.dirname(go), { recursive: true, force: true })))
      const { seen, run } = yield* setupRun(
        trainerConfig({ schedule: "sync", batch_groups: 2, group_size: 2, max_versions: 4, checkpoint_every: 0, lr: 1e-3, micro_batch_tokens: 2048 }),
        { AGENT_GO_FILE: go }
      )
      const system = yield* ActorSystem
      const device = () => system.localActors().find((a) => a.name === "device")
      // At version 1, hold the next batch's agents (they are still starting: the event comes
      // before their groups are submitted), end the device's worker thread the way a crash would,
      // and once the supervisor has restarted it, let the agents go.
      yield* Effect.forkScoped(Effect.gen(function*() {
        while ((yield* Queue.take(seen))._tag !== "Version");
        rmSync(go)
        const thread = threads.find((t) => t.entry.includes("device"))
        expect(thread, "the device worker thread").toBeDefined()
        yield* Effect.promise(() => thread!.thread.terminate())
        yield* Effect.sync(device).pipe(
          Effect.filterOrFail((d) => d?.restarts === 1 && d.status === "running", () => "not restarted yet"),
          Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("60 seconds")))
        )
        writeFileSync(go, "")
      }))
      const error = yield* Effect.flip(run)
      // The restarted worker loaded the model directory, the base policy (version 0).
      expect(error).toMatchObject({ _tag: "TrainerError", operation: "device version" })
      expect(error.message).toMatch(/generation device serves version 0 where the run is at version 1: it restarted/)
      expect(error.message).toMatch(/--resume/)
    }).pipe(Effect.provide(ActorSystem.layerLocal())), 120_000)

  it.scopedLive("split: a second device trains and its weights reach the generation device", () =>
    withRun(
      trainerConfig({ schedule: "split", batch_groups: 2, group_size: 2, async_groups: 3, max_staleness: 1, max_versions: 2, checkpoint_every: 0, lr: 1e-3, micro_batch_tokens: 2048 }),
      (run) =>
        Effect.gen(function*() {
          expect(run.summary.versions).toBe(2)
          // One metrics line per version: the checks over them below must not run over nothing.
          expect(run.metrics.map((m) => m.version)).toEqual([1, 2])
          yield* checkInvariants(run, 1)
          // The generation device got the training device's weights after each update.
          expect((yield* run.stack.ports.generation.info).version).toBe(2)
          for (const m of run.metrics) expect(m.pause.pauseSeconds).toBe(0)
          // The Gateway heard of each swap without a pause: it serves the new version and the
          // store records every version it served, as the collocated schedule's resumes do.
          expect((yield* run.stack.store.modelVersions).map((v) => v.version)).toEqual([0, 1, 2])
          expect((yield* run.stack.gateway.state).version).toBe(2)
        })
    ), 120_000)
})
