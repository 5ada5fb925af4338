/**
 * The Effect API for scripting runs: `Reins` is a service over a running stack (device workers,
 * Gateway, controller, launchers) that trains, evaluates, and lets a program look at what was
 * recorded. Get one with `Reins.local(options)` (every role in this process) or
 * `Reins.connect(address, options)` (this process joins a cluster as its gateway+trainer node;
 * harnesses run on the cluster's `rollout` nodes).
 *
 *   const program = Effect.gen(function*() {
 *     const reins = yield* Reins.Reins
 *     yield* reins.train(trainerConfig({ max_versions: 5 }))
 *     const result = yield* reins.evaluate
 *   }).pipe(Effect.provide(Reins.local({ run })))
 *
 * Every failure is a typed error (`TrainerError` naming what failed), never an exception.
 */
import type { GatewayState, PauseMode, TrainerConfig } from "@reins/protocol"
import { ActorSystem, Node } from "@reins/runtime"
import { loadTaskSet, makeTaskQueue, type QueuePosition, type TaskRecord } from "@reins/rollout/tasks"
import {
  type Cursor,
  idleStatus,
  trainerActorLayer,
  type RunSummary,
  runTraining,
  type TaskItem,
  type TaskSource,
  type TrainerError,
  trainerError,
  type TrainerEvent
} from "@reins/trainer"
import { Context, Effect, Layer, Option, PubSub, Ref, type Scope, Stream } from "effect"
import { mkdirSync } from "node:fs"
import path from "node:path"
import { evaluate, type EvalResult } from "../run/evaluate.js"
import type { RunConfig } from "../run/RunConfig.js"
import { localStack, type LocalStack, type LocalStackOptions } from "../wiring/localStack.js"
import { recordEvaluation, recordTrainerEvents } from "../wiring/runEvents.js"

/**
 * Besides the run: a second device (`split`, needed by the split schedule), LoRA adapters (the
 * Trainer config's `lora`) instead of every weight, harnesses in this process too
 * (`localLauncher`, default true; a joined node may leave them to the cluster), and where the
 * Gateway listens (see `LocalStackOptions`).
 */
export interface ReinsOptions extends Pick<LocalStackOptions, "split" | "lora" | "localLauncher" | "http" | "publicUrl"> {
  /** Model, tasks, harness, concurrency, evaluation and folders (see `RunConfig`). */
  readonly run: RunConfig
  /** Where metrics and checkpoints go; default `<runs_dir>/<time>-<name>`. */
  readonly runDir?: string | undefined
}

export interface ReinsService {
  readonly runDir: string
  /** The Gateway's agent-facing URL (`…/v1`). */
  readonly openaiBaseUrl: string
  /**
   * Trains from the current weights until `max_versions` more versions (or the tasks run out).
   * The task order continues across calls; `resume` continues a crashed run from its checkpoint.
   */
  readonly train: (trainer: TrainerConfig, options?: { readonly resume?: Cursor | undefined }) => Effect.Effect<RunSummary, TrainerError>
  /** Every Trainer event (versions, skipped batches, checkpoints) from now on. */
  readonly events: Stream.Stream<TrainerEvent>
  /** pass@1 of the current weights on the run's held-out tasks (see `RunConfig.eval`); a rollout passes at reward ≥ `passThreshold` (default 1). */
  readonly evaluate: (passThreshold?: number, split?: "test" | "train") => Effect.Effect<EvalResult, TrainerError>
  readonly version: Effect.Effect<number, TrainerError>
  readonly pause: (mode: PauseMode) => Effect.Effect<GatewayState, TrainerError>
  readonly resume: Effect.Effect<GatewayState, TrainerError>
  /** Saves the current weights (and optimizer state) as a model directory. */
  readonly save: (dir: string) => Effect.Effect<void, TrainerError>
  /** Serves the weights of a model directory as `version`. */
  readonly restore: (dir: string, version: number) => Effect.Effect<void, TrainerError>
  /** The stack underneath: the store (rollouts, calls, rewards), the controller, the Gateway. */
  readonly stack: LocalStack
}

export class Reins extends Context.Tag("reins/Reins")<Reins, ReinsService>() {}

const runId = (name: string) => `${new Date().toISOString().replace(/[:.]/g, "-").replace(/Z$/, "")}-${name}`

const taskItem = (r: TaskRecord): TaskItem => ({ task: r.task, extra: r.extra })

/** The held-out tasks of a run config. */
export const evalTasks = (run: RunConfig, split: "test" | "train" = "test"): Effect.Effect<ReadonlyArray<TaskItem>, TrainerError> =>
  Effect.map(loadTaskSet(run.eval.tasks ?? run.tasks), (set) => {
    const tests = set.tasks.filter((r) => (r.task.split ?? "train") === split).map(taskItem)
    return tests.slice(0, run.eval.limit ?? tests.length)
  }).pipe(Effect.mapError(trainerError("load evaluation tasks")))

/** The training task order, created on first use and continued by every later `train`. */
const trainingTasks = (run: RunConfig, source: Ref.Ref<TaskSource | null>, trainer: TrainerConfig, start: unknown) =>
  Effect.gen(function*() {
    const existing = yield* Ref.get(source)
    if (existing !== null && start === undefined) return existing
    const set = yield* loadTaskSet(run.tasks)
    const queue = yield* makeTaskQueue({
      tasks: set.tasks,
      groupSize: trainer.group_size,
      seed: trainer.seed,
      split: "train",
      ...(start === undefined ? {} : { start: start as QueuePosition })
    })
    const made: TaskSource = { next: Effect.map(queue.next, Option.map((g) => taskItem(g.record))), position: queue.position }
    yield* Ref.set(source, made)
    return made
  })

const make = (options: ReinsOptions): Effect.Effect<ReinsService, unknown, Scope.Scope | ActorSystem> =>
  Effect.gen(function*() {
    const { run, runDir: givenDir, ...stackOptions } = options
    const runDir = givenDir ?? path.join(run.runs_dir, runId(run.name))
    mkdirSync(runDir, { recursive: true })
    const stack = yield* localStack({
      ...stackOptions,
      modelDir: run.model,
      parsers: { toolParser: run.tool_parser, reasoningParser: run.reasoning_parser },
      dataDir: path.join(run.data_dir, path.basename(runDir)),
      harness: run.harness,
      concurrency: run.concurrency
    })
    const events = yield* PubSub.unbounded<TrainerEvent>()
    // Subscribed before any run starts, so no update is missed; the dashboard reads them from the event log.
    const recorded = yield* PubSub.subscribe(events)
    yield* Effect.forkScoped(recordTrainerEvents(stack.store, Stream.fromQueue(recorded)))
    const status = yield* Ref.make(idleStatus((yield* stack.ports.generation.info).version))
    yield* Layer.build(trainerActorLayer(status, events))
    const tasks = yield* Ref.make<TaskSource | null>(null)
    const tests = yield* Effect.cached(evalTasks(run))
    const tasksOf = (split: "test" | "train") => (split === "test" ? tests : evalTasks(run, split))
    const { gateway, training, generation } = stack.ports
    return {
      runDir,
      openaiBaseUrl: stack.openaiBaseUrl,
      stack,
      train: (trainer, trainOptions) =>
        Effect.gen(function*() {
          const source = yield* trainingTasks(run, tasks, trainer, trainOptions?.resume?.tasks).pipe(Effect.mapError(trainerError("load tasks")))
          return yield* Effect.scoped(runTraining({ config: trainer, ports: { ...stack.ports, tasks: source }, runDir, resume: trainOptions?.resume, events, status }))
        }),
      events: Stream.fromPubSub(events),
      evaluate: (passThreshold = 1, split = "test") =>
        Effect.flatMap(tasksOf(split), (items) =>
          evaluate(stack.controller, { tasks: items, harness: run.harness, samples: run.eval.samples, greedyEnv: run.eval.greedy_env, passThreshold }).pipe(
            Effect.mapError(trainerError("evaluate")),
            Effect.tap((result) =>
              Effect.flatMap(generation.info, (info) => recordEvaluation(stack.store, split, info.version, result)).pipe(
                Effect.catchAll((e) => Effect.logWarning(`could not record an evaluation for the dashboard: ${String(e)}`))
              ))
          )),
      version: Effect.map(generation.info, (i) => i.version),
      pause: gateway.pause,
      resume: gateway.resume,
      save: training.save,
      restore: (dir, version) =>
        Effect.zipRight(generation.restore(dir, version), training === generation ? Effect.void : training.restore(dir, version))
    } satisfies ReinsService
  })

/** Every role in this process. */
export const local = (options: ReinsOptions): Layer.Layer<Reins, TrainerError> =>
  Layer.scoped(Reins, Effect.mapError(make(options), trainerError("start"))).pipe(Layer.provide(ActorSystem.layerLocal()))

/** This process joins the cluster at `node.join` as its gateway+trainer node. */
export const connect = (node: Node.NodeConfig, options: ReinsOptions): Layer.Layer<Reins, TrainerError> =>
  Layer.scoped(Reins, Effect.mapError(make(options), trainerError("start"))).pipe(
    Layer.provide(Layer.mapError(Node.layer({ roles: ["gateway", "trainer"], ...node }, Layer.empty), trainerError("join the cluster")))
  )
