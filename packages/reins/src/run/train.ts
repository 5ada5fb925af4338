/**
 * A whole training run on one machine (`reins train CONFIG`): every role in this process (device
 * workers, Gateway, launcher, controller, Trainer), the base policy evaluated on the held-out
 * tasks, the schedule run, the final policy evaluated, and the run's folder written:
 *
 *   runs/<id>/config.json        the resolved config
 *   runs/<id>/metrics.jsonl      one line per version
 *   runs/<id>/checkpoints/       every K versions and the final one (model dirs + cursors)
 *   runs/<id>/base-eval.json     the base policy's evaluation (kept across resumes)
 *   runs/<id>/summary.json       base vs final pass@1, wall time, versions, harness errors
 *   runs/<id>/report.md, .svg    the same for people
 *
 * `resume` continues a run from its newest checkpoint after a crash (see the Trainer's
 * checkpoints: nothing is trained twice).
 */
import type { TrainerConfig } from "@reins/protocol"
import { ActorSystem, Node } from "@reins/runtime"
import { loadTaskSet, makeTaskQueue, type TaskRecord } from "@reins/rollout/tasks"
import { latestCheckpoint, runTraining, type TaskItem, type TrainerEvent, trainerError, truncateMetrics } from "@reins/trainer"
import { Effect, Layer, Option, PubSub, Stream } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import path from "node:path"
import { localStack, type LocalStack } from "../wiring/localStack.js"
import { evaluate, type EvalResult } from "./evaluate.js"
import { writeRunReport } from "./report.js"
import type { RunConfig } from "./RunConfig.js"

export interface TrainOptions {
  readonly run: RunConfig
  readonly trainer: TrainerConfig
  /** Continue this run folder from its newest checkpoint. */
  readonly resumeDir?: string | undefined
  /** Called with every Trainer event (progress display). */
  readonly onEvent?: (event: TrainerEvent) => Effect.Effect<void>
  readonly log?: (line: string) => Effect.Effect<void>
  /**
   * Join a cluster as its gateway+trainer node instead of running alone: harnesses then run on
   * the cluster's `rollout` nodes (and here too when `localLauncher`).
   */
  readonly cluster?: ClusterOptions | undefined
  /** Where the Gateway listens when not in a cluster (default 127.0.0.1:0). */
  readonly http?: { readonly host: string; readonly port: number } | undefined
  readonly publicUrl?: string | undefined
}

export interface ClusterOptions {
  readonly node: Node.NodeConfig
  readonly localLauncher: boolean
  /** Where the Gateway listens; rollout nodes on other machines must reach it. */
  readonly http?: { readonly host: string; readonly port: number } | undefined
  readonly publicUrl?: string | undefined
}

export interface RunSummaryFile {
  readonly run_id: string
  readonly schedule: string
  readonly base_pass_at_1: number | null
  readonly final_pass_at_1: number | null
  readonly base_greedy_pass_at_1: number | null
  readonly final_greedy_pass_at_1: number | null
  readonly test_tasks: number
  readonly wall_s: number
  readonly train_wall_s: number
  readonly versions: number
  readonly harness_errors: number
  readonly final_checkpoint: string
}

const runId = (name: string) => `${new Date().toISOString().replace(/[:.]/g, "-").replace(/Z$/, "")}-${name}`

const writeJson = (file: string, value: unknown) => writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`)

const loadTasks = (file: string, split: "train" | "test") =>
  Effect.map(loadTaskSet(file), (set) => set.tasks.filter((r) => (r.task.split ?? "train") === split).map(taskItem))

const taskItem = (r: TaskRecord): TaskItem => ({ task: r.task, extra: r.extra })

/** The training task order: seeded, resumable from a checkpoint's position. */
const taskSource = (run: RunConfig, trainer: TrainerConfig, start: unknown) =>
  Effect.gen(function*() {
    const set = yield* loadTaskSet(run.tasks)
    const queue = yield* makeTaskQueue({
      tasks: set.tasks,
      groupSize: trainer.group_size,
      seed: trainer.seed,
      split: "train",
      ...(start === undefined ? {} : { start: start as { epoch: number; offset: number } })
    })
    return {
      next: Effect.map(queue.next, Option.map((g) => taskItem(g.record))),
      position: queue.position
    }
  })

const evalTasks = (run: RunConfig) =>
  Effect.map(loadTasks(run.eval.tasks ?? run.tasks, "test"), (tasks) => tasks.slice(0, run.eval.limit ?? tasks.length))

const runEval = (stack: LocalStack, run: RunConfig, trainer: TrainerConfig, tasks: ReadonlyArray<TaskItem>) =>
  evaluate(stack.controller, {
    tasks,
    harness: run.harness,
    samples: run.eval.samples,
    greedyEnv: run.eval.greedy_env,
    passThreshold: trainer.pass_threshold
  })

export const train = (options: TrainOptions) =>
  Effect.gen(function*() {
    const { run, trainer } = options
    const log = options.log ?? ((line: string) => Effect.log(line))
    const started = performance.now()
    const id = options.resumeDir === undefined ? runId(run.name) : path.basename(options.resumeDir)
    const runDir = options.resumeDir ?? path.join(run.runs_dir, id)
    const checkpoints = path.join(runDir, "checkpoints")
    mkdirSync(runDir, { recursive: true })
    writeJson(path.join(runDir, "config.json"), { ...run, trainer })

    const resume = options.resumeDir === undefined ? null : yield* latestCheckpoint(checkpoints)
    const stack = yield* localStack({
      modelDir: run.model,
      dataDir: path.join(run.data_dir, id),
      harness: run.harness,
      concurrency: run.concurrency,
      split: trainer.schedule === "split",
      localLauncher: options.cluster?.localLauncher ?? true,
      http: options.cluster?.http ?? options.http,
      publicUrl: options.cluster?.publicUrl ?? options.publicUrl
    })
    yield* log(`Gateway at ${stack.openaiBaseUrl}; run folder ${runDir}`)
    if (resume !== null) {
      yield* stack.ports.generation.restore(resume.dir, resume.cursor.version)
      if (stack.ports.training !== stack.ports.generation) yield* stack.ports.training.restore(resume.dir, resume.cursor.version)
      yield* truncateMetrics(path.join(runDir, "metrics.jsonl"), resume.cursor.version)
      // The crashed run's rollouts are handed out again from the checkpoint's cursor; whatever the
      // controller recovered of them would only run twice.
      const cancelled = yield* stack.controller.cancelAll("the run resumed from a checkpoint")
      if (cancelled > 0) yield* log(`cancelled ${cancelled} rollout(s) left by the crashed run`)
      yield* log(`resuming from version ${resume.cursor.version} (${resume.dir})`)
    }

    const tests = run.eval.enabled ? yield* evalTasks(run) : []
    const baseFile = path.join(runDir, "base-eval.json")
    const base: EvalResult | null = !run.eval.enabled
      ? null
      : existsSync(baseFile)
      ? (JSON.parse(readFileSync(baseFile, "utf8")) as EvalResult)
      : yield* Effect.tap(runEval(stack, run, trainer, tests), (r) => Effect.sync(() => writeJson(baseFile, r)))
    if (base !== null) yield* log(`base policy: pass@1 ${fmt(base.passAt1)}, greedy ${fmt(base.greedyPassAt1)} on ${base.tasks} test tasks`)

    const events = yield* PubSub.unbounded<TrainerEvent>()
    if (options.onEvent !== undefined) {
      yield* Effect.forkScoped(Stream.runForEach(Stream.fromPubSub(events), options.onEvent))
    }
    const trainStarted = performance.now()
    const summary = yield* Effect.scoped(runTraining({
      config: trainer,
      ports: { ...stack.ports, tasks: yield* taskSource(run, trainer, resume?.cursor.tasks) },
      runDir,
      resume: resume?.cursor,
      events
    }))
    const trainWall = (performance.now() - trainStarted) / 1000
    const final = run.eval.enabled ? yield* runEval(stack, run, trainer, tests) : null
    if (final !== null) yield* log(`final policy: pass@1 ${fmt(final.passAt1)}, greedy ${fmt(final.greedyPassAt1)}`)

    const file: RunSummaryFile = {
      run_id: id,
      schedule: trainer.schedule,
      base_pass_at_1: base?.passAt1 ?? null,
      final_pass_at_1: final?.passAt1 ?? null,
      base_greedy_pass_at_1: base?.greedyPassAt1 ?? null,
      final_greedy_pass_at_1: final?.greedyPassAt1 ?? null,
      test_tasks: tests.length,
      wall_s: (performance.now() - started) / 1000,
      train_wall_s: trainWall,
      versions: summary.versions,
      harness_errors: yield* harnessErrors(stack),
      final_checkpoint: summary.finalCheckpoint
    }
    writeJson(path.join(runDir, "summary.json"), file)
    yield* writeRunReport(runDir, file)
    return { runDir, summary: file }
  }).pipe(
    Effect.mapError(trainerError("train")),
    Effect.scoped,
    Effect.provide(options.cluster === undefined ? ActorSystem.layerLocal() : Node.layer(options.cluster.node, Layer.empty))
  )

/** Calls a harness saw fail: recorded calls with a status other than 200, outside cancelled rollouts. */
const harnessErrors = (stack: LocalStack) =>
  Effect.gen(function*() {
    let errors = 0
    let cursor: string | undefined
    for (;;) {
      const page = yield* stack.store.rollouts({ limit: 500, ...(cursor === undefined ? {} : { cursor }) })
      for (const r of page.rollouts) {
        if (r.state === "cancelled") continue
        const detail = yield* stack.store.rollout(r.id)
        errors += detail.calls.filter((c) => c.status !== 200).length
      }
      if (page.next === null) return errors
      cursor = page.next
    }
  })

const fmt = (x: number | null) => (x === null ? "n/a" : `${(100 * x).toFixed(1)}%`)
