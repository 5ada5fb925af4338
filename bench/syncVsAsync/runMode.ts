/**
 * One mode of the benchmark, end to end with the real parts: `localStack` (device worker(s), the
 * Gateway on loopback with its SQLite store, the local launcher running real harness processes,
 * the Rollout Controller) and the Trainer's `runTraining` loop — the same pieces `reins train`
 * uses. The Trainer's ports are instrumented (pause/resume, every update, every weight swap), the
 * store is read back after the run, and the final policy is evaluated on held-out tasks.
 */
import { HarnessSpec } from "@reins/protocol"
import { loadTaskSet, makeTaskQueue, type TaskRecord } from "@reins/rollout/tasks"
import { ActorSystem } from "@reins/runtime"
import { type DevicePort, runTraining, type TaskItem, type TrainerEvent, type TrainerPorts, trainerConfig } from "@reins/trainer"
import { Effect, Option, PubSub, Queue } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { localStack, type LocalStack } from "reins"
import type { CallRec, Interval, Mode, ModeRecords, RolloutRec, TrainRec, VersionRec } from "./records.js"

export interface Workload {
  readonly harness: HarnessSpec
  /** The harness without the tail (evaluation measures the policy, not the tail). */
  readonly evalHarness: HarnessSpec
  readonly tasksFile: string
  readonly testFile: string
  readonly modelDir: string
  readonly groups: number
  readonly n: number
  readonly asyncGroups: number
  readonly maxStaleness: number
  readonly updates: number
  readonly seed: number
  readonly lr: number
  /** Harness processes at once: enough that no admitted rollout waits for a slot. */
  readonly concurrency: number
  /** Held-out tasks evaluated at the end (0: no evaluation) and samples per task. */
  readonly evalTasks: number
  readonly evalSamples: number
  /** A mode that has not finished its updates by then stops and is reported as timed out. */
  readonly timeoutS: number
}

const scheduleOf = (mode: Mode) =>
  mode === "sync"
    ? { schedule: "sync" as const, pause: "interrupt" as const }
    : mode === "split"
    ? { schedule: "split" as const, pause: "interrupt" as const }
    : { schedule: "collocated" as const, pause: mode === "collocated-drain" ? "drain" as const : "interrupt" as const }

export const trainerSettings = (w: Workload, mode: Mode) =>
  trainerConfig({
    ...scheduleOf(mode),
    batch_groups: w.groups,
    group_size: w.n,
    async_groups: w.asyncGroups,
    max_staleness: w.maxStaleness,
    max_versions: w.updates,
    checkpoint_every: 0,
    lr: w.lr,
    seed: w.seed
  })

const taskItem = (r: TaskRecord): TaskItem => ({ task: r.task, extra: r.extra })

/** The same seeded task order in every mode; bounded so a run that never trains still ends. */
const taskSource = (w: Workload, limit: number) =>
  Effect.gen(function*() {
    const set = yield* loadTaskSet(w.tasksFile)
    const queue = yield* makeTaskQueue({ tasks: set.tasks, groupSize: w.n, seed: w.seed, split: "train" })
    let handed = 0
    return {
      next: Effect.flatMap(Effect.sync(() => handed++ < limit), (more) =>
        more ? Effect.map(queue.next, Option.map((g) => taskItem(g.record))) : Effect.succeed(Option.none<TaskItem>())),
      position: queue.position
    }
  })

const testTasks = (w: Workload) =>
  Effect.map(loadTaskSet(w.testFile), (set) => set.tasks.filter((r) => (r.task.split ?? "test") === "test").slice(0, w.evalTasks).map(taskItem))

/** Sampled pass@1 through the real harness: every task `samples` times, mean pass rate. */
const passAt1 = (stack: LocalStack, w: Workload, tasks: ReadonlyArray<TaskItem>) =>
  Effect.gen(function*() {
    if (tasks.length === 0) return null
    const ended = yield* Effect.forEach(
      tasks,
      (item) =>
        Effect.flatMap(stack.controller.submit({ task: item.task, taskExtra: item.extra, size: w.evalSamples, harness: w.evalHarness }), (g) =>
          stack.controller.awaitGroup(g.groupId)),
      { concurrency: "unbounded" }
    ).pipe(Effect.map((groups) => groups.flat()))
    return ended.filter((e) => e.reward !== null && e.reward >= 1).length / Math.max(1, ended.length)
  })

const tokensOf = (steps: ReadonlyArray<ReadonlyArray<{ readonly tokens: Int32Array }>>) => steps.reduce((s, step) => s + step.reduce((t, x) => t + x.tokens.length, 0), 0)

interface Instruments {
  readonly pauses: Array<Interval>
  readonly trains: Array<TrainRec>
  readonly syncs: Array<Interval>
}

/**
 * The Trainer's ports with every pause, update and weight swap timed. One device stays one object
 * (the run loop tells the collocated case by `training === generation`).
 */
const instrument = (ports: LocalStack["ports"], rec: Instruments): LocalStack["ports"] => {
  const timed = <A, E>(effect: Effect.Effect<A, E>, done: (i: Interval, a: A) => void) =>
    Effect.gen(function*() {
      const start = Date.now()
      const a = yield* effect
      done({ start, end: Date.now() }, a)
      return a
    })
  const wrap = (d: DevicePort): DevicePort => ({
    ...d,
    train: (request) => timed(d.train(request), (i) => rec.trains.push({ ...i, tokens: tokensOf(request.steps) })),
    sendWeightsTo: (target) => timed(d.sendWeightsTo(target), (i) => rec.syncs.push(i))
  })
  const training = wrap(ports.training)
  let pausedAt: number | null = null
  const gateway: TrainerPorts["gateway"] = {
    ...ports.gateway,
    pause: (mode) => Effect.zipRight(Effect.sync(() => void (pausedAt = Date.now())), ports.gateway.pause(mode)),
    resume: Effect.tap(ports.gateway.resume, () =>
      Effect.sync(() => {
        if (pausedAt !== null) rec.pauses.push({ start: pausedAt, end: Date.now() })
        pausedAt = null
      }))
  }
  return {
    ...ports,
    gateway,
    training,
    generation: ports.training === ports.generation ? training : ports.generation
  }
}

const versionRange = (versions: Int32Array): [number | null, number | null] => {
  if (versions.length === 0) return [null, null]
  let lo = versions[0]!, hi = versions[0]!
  for (const v of versions) {
    if (v < lo) lo = v
    if (v > hi) hi = v
  }
  return [lo, hi]
}

/** Every rollout the training run created (evaluations before it are older than t0). */
const readRollouts = (stack: LocalStack, since: number, trained: ReadonlySet<string>) =>
  Effect.gen(function*() {
    const out: Array<RolloutRec> = []
    let cursor: string | undefined
    for (;;) {
      const page = yield* stack.store.rollouts({ limit: 500, ...(cursor === undefined ? {} : { cursor }) })
      for (const r of page.rollouts) {
        if (r.createdAt < since) continue
        const d = yield* stack.store.rollout(r.id)
        const last = [...d.attempts].sort((a, b) => a.index - b.index).at(-1)
        const calls: Array<CallRec> = d.calls
          .filter((c) => last === undefined || c.attemptId === last.id)
          .sort((a, b) => a.seq - b.seq)
          .map((c) => {
            const [minVersion, maxVersion] = versionRange(c.versions)
            return {
              receivedAt: c.timings.receivedAt,
              startedAt: c.timings.startedAt,
              finishedAt: c.timings.finishedAt,
              heldMs: c.timings.heldMs,
              promptTokens: c.promptIds.length,
              outputTokens: c.outputIds.length,
              status: c.status,
              error: c.error,
              minVersion,
              maxVersion
            }
          })
        out.push({
          id: r.id,
          group: r.group,
          state: r.state,
          reward: r.reward,
          createdAt: r.createdAt,
          startedAt: last?.startedAt ?? null,
          finishedAt: last?.finishedAt ?? null,
          attempts: d.attempts.length,
          calls,
          trained: trained.has(r.id)
        })
      }
      if (page.next === null) return out
      cursor = page.next
    }
  })

const versionRec = (e: Extract<TrainerEvent, { _tag: "Version" }>): VersionRec => {
  const m = e.metrics
  return {
    version: m.version,
    at: m.at,
    wallSeconds: m.wallSeconds,
    rollouts: e.rolloutIds.length,
    tokens: m.used.tokens,
    actionTokens: m.used.actionTokens,
    rewardMean: m.reward.mean,
    passRate: m.reward.passRate,
    staleness: [...m.staleness.histogram],
    stalenessMax: m.staleness.max,
    pauseSeconds: m.pause.pauseSeconds,
    heldCalls: m.pause.heldCalls,
    device: { generating: m.device.generating, training: m.device.training, idle: m.device.idle }
  }
}

export interface RunModeOptions {
  readonly mode: Mode
  readonly repeat: number
  /** Also evaluate the base policy (before training, in this mode's stack). */
  readonly baseEval: boolean
  /** Evaluate the final policy (false: `finalPassAt1` is null). */
  readonly finalEval: boolean
  readonly log: (line: string) => void
  /** Aborting interrupts the run: its scope closes, harness processes are stopped, temp files go. */
  readonly signal?: AbortSignal | undefined
}

export const runMode = (w: Workload, o: RunModeOptions): Promise<ModeRecords> =>
  Effect.gen(function*() {
    const dir = mkdtempSync(path.join(os.tmpdir(), `reins-bench-${o.mode}-`))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
    const split = o.mode === "split"
    const stack = yield* localStack({ modelDir: w.modelDir, dataDir: path.join(dir, "data"), harness: w.harness, concurrency: w.concurrency, split })
    const { backend } = yield* stack.ports.training.info
    const tests = w.evalTasks > 0 ? yield* testTasks(w) : []
    const basePassAt1 = o.baseEval ? yield* passAt1(stack, w, tests) : null
    if (basePassAt1 !== null) o.log(`  base policy: pass@1 ${basePassAt1.toFixed(3)} on ${tests.length} test tasks × ${w.evalSamples}`)

    const rec: Instruments = { pauses: [], trains: [], syncs: [] }
    const ports = instrument(stack.ports, rec)
    const events = yield* PubSub.unbounded<TrainerEvent>()
    const seen = yield* PubSub.subscribe(events)
    const tasks = yield* taskSource(w, w.updates * w.groups * 4 + w.asyncGroups)
    const t0 = Date.now()
    const finished = yield* runTraining({ config: trainerSettings(w, o.mode), ports: { ...ports, tasks }, runDir: path.join(dir, "run"), events }).pipe(
      Effect.scoped,
      Effect.timeoutOption(`${w.timeoutS} seconds`)
    )
    const all = yield* Queue.takeAll(seen)
    const versions = [...all].flatMap((e) => (e._tag === "Version" ? [versionRec(e)] : []))
    const skipped = [...all].filter((e) => e._tag === "Skipped").length
    const tEnd = versions.at(-1)?.at ?? Date.now()
    if (Option.isNone(finished)) {
      o.log(`  ${o.mode}: timed out after ${w.timeoutS} s with ${versions.length}/${w.updates} updates`)
      yield* stack.controller.cancelAll("the benchmark mode timed out")
    }
    const trained = new Set([...all].flatMap((e) => (e._tag === "Version" ? e.rolloutIds : [])))
    const rollouts = yield* readRollouts(stack, t0 - 1, trained)
    const finalPassAt1 = o.finalEval ? yield* passAt1(stack, w, tests) : null
    return {
      mode: o.mode,
      devices: split ? 2 : 1,
      backend,
      repeat: o.repeat,
      t0,
      tEnd,
      rollouts,
      versions,
      pauses: rec.pauses,
      trains: rec.trains,
      syncs: rec.syncs,
      skipped,
      timedOut: Option.isNone(finished),
      finalPassAt1,
      basePassAt1
    } satisfies ModeRecords
  }).pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal()), (e) => Effect.runPromise(e, o.signal === undefined ? undefined : { signal: o.signal }))
