/**
 * A whole training run (`reins train CONFIG`) on the `Reins` service: the base policy evaluated on
 * the held-out tasks, the schedule run, the final policy evaluated, and the run's folder written:
 *
 *   runs/<id>/config.json        the resolved config
 *   runs/<id>/metrics.jsonl      one line per version
 *   runs/<id>/checkpoints/       every K versions and the final one (model dirs + cursors)
 *   runs/<id>/base-eval.json     the base policy's evaluation (kept across resumes)
 *   runs/<id>/summary.json       base vs final pass@1, wall time, versions, harness errors
 *   runs/<id>/report.md, .svg    the same for people
 *
 * `resumeDir` continues a run from its newest checkpoint after a crash (see the Trainer's
 * checkpoints: nothing is trained twice).
 */
import { isContextFull, isHarnessError, type TrainerConfig } from "@reins/protocol"
import type { Node } from "@reins/runtime"
import { latestCheckpoint, type TrainerEvent, truncateMetrics } from "@reins/trainer"
import { Effect, Stream } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import path from "node:path"
import * as Reins from "../api/Reins.js"
import type { LocalStack } from "../wiring/localStack.js"
import type { EvalResult } from "./evaluate.js"
import { pct, writeRunReport } from "./report.js"
import type { RunConfig } from "./RunConfig.js"

/** `http` and `publicUrl`: where the Gateway listens (default 127.0.0.1:0) and the `/v1` URL harnesses are given. */
export interface TrainOptions extends Pick<Reins.ReinsOptions, "http" | "publicUrl"> {
  readonly run: RunConfig
  readonly trainer: TrainerConfig
  /** Continue this run folder from its newest checkpoint. */
  readonly resumeDir?: string | undefined
  /** Called with every Trainer event (progress display). */
  readonly onEvent?: (event: TrainerEvent) => Effect.Effect<void>
  /** Called once when resuming, with the updates the run made before (`max_versions` counts them). */
  readonly onResume?: (versions: number) => Effect.Effect<void>
  readonly log?: (line: string) => Effect.Effect<void>
  /** Join a cluster as its gateway+trainer node instead of running alone. */
  readonly cluster?: { readonly node: Node.NodeConfig; readonly localLauncher: boolean } | undefined
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
  /** Calls a harness saw fail, except the model's context limit (must be 0). */
  readonly harness_errors: number
  /** Calls refused because the conversation outgrew the model's context: episodes that ended there. */
  readonly context_full_calls: number
  readonly final_checkpoint: string
}

const writeJson = (file: string, value: unknown) => writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`)

/** The base policy's evaluation, computed once per run folder (a resumed run keeps it). */
const baseEvaluation = (reins: Reins.ReinsService, options: TrainOptions) =>
  Effect.gen(function*() {
    if (!options.run.eval.enabled) return null
    const file = path.join(reins.runDir, "base-eval.json")
    if (existsSync(file)) return JSON.parse(readFileSync(file, "utf8")) as EvalResult
    const result = yield* reins.evaluate(options.trainer.pass_threshold)
    writeJson(file, result)
    return result
  })

const runWith = (options: TrainOptions) =>
  Effect.gen(function*() {
    const reins = yield* Reins.Reins
    const { run, trainer } = options
    const log = options.log ?? ((line: string) => Effect.log(line))
    const started = performance.now()
    writeJson(path.join(reins.runDir, "config.json"), { ...run, trainer })
    yield* log(`Gateway at ${reins.openaiBaseUrl}; run folder ${reins.runDir}`)

    const resume = options.resumeDir === undefined ? null : yield* latestCheckpoint(path.join(reins.runDir, "checkpoints"))
    if (resume !== null) {
      yield* reins.restore(resume.dir, resume.cursor.version)
      yield* truncateMetrics(path.join(reins.runDir, "metrics.jsonl"), resume.cursor.version)
      // The crashed run's rollouts are handed out again from the checkpoint's cursor; whatever the
      // controller recovered of them would only run twice.
      const cancelled = yield* reins.stack.controller.cancelAll("the run resumed from a checkpoint")
      yield* log(`resuming from version ${resume.cursor.version} (${resume.dir})${cancelled > 0 ? `; cancelled ${cancelled} rollout(s) of the crashed run` : ""}`)
      if (options.onResume !== undefined) yield* options.onResume(resume.cursor.versions)
    }

    const base = yield* baseEvaluation(reins, options)
    if (base !== null) yield* log(`base policy: pass@1 ${pct(base.passAt1)}, greedy ${pct(base.greedyPassAt1)} on ${base.tasks} test tasks`)
    if (options.onEvent !== undefined) yield* Effect.forkScoped(Stream.runForEach(reins.events, options.onEvent))
    const trainStarted = performance.now()
    const summary = yield* reins.train(trainer, { resume: resume?.cursor })
    const trainWall = (performance.now() - trainStarted) / 1000
    const final = run.eval.enabled ? yield* reins.evaluate(trainer.pass_threshold) : null
    if (final !== null) yield* log(`final policy: pass@1 ${pct(final.passAt1)}, greedy ${pct(final.greedyPassAt1)}`)

    const file: RunSummaryFile = {
      run_id: path.basename(reins.runDir),
      schedule: trainer.schedule,
      base_pass_at_1: base?.passAt1 ?? null,
      final_pass_at_1: final?.passAt1 ?? null,
      base_greedy_pass_at_1: base?.greedyPassAt1 ?? null,
      final_greedy_pass_at_1: final?.greedyPassAt1 ?? null,
      test_tasks: base?.tasks ?? final?.tasks ?? 0,
      wall_s: (performance.now() - started) / 1000,
      train_wall_s: trainWall,
      versions: summary.versions,
      ...(yield* failedCalls(reins.stack)),
      final_checkpoint: summary.finalCheckpoint
    }
    writeJson(path.join(reins.runDir, "summary.json"), file)
    yield* writeRunReport(reins.runDir, file)
    return { runDir: reins.runDir, summary: file }
  })

export const train = (options: TrainOptions) => {
  if (options.resumeDir !== undefined) mkdirSync(options.resumeDir, { recursive: true })
  const reinsOptions: Reins.ReinsOptions = {
    run: options.run,
    runDir: options.resumeDir,
    split: options.trainer.schedule === "split",
    lora: options.trainer.lora,
    localLauncher: options.cluster?.localLauncher ?? true,
    http: options.http,
    publicUrl: options.publicUrl
  }
  const layer = options.cluster === undefined ? Reins.local(reinsOptions) : Reins.connect(options.cluster.node, reinsOptions)
  return runWith(options).pipe(Effect.scoped, Effect.provide(layer))
}

/** Recorded calls with a status other than 200, outside cancelled rollouts: context limits apart. */
const failedCalls = (stack: LocalStack) =>
  Effect.map(stack.store.failedCalls, (calls) => ({
    harness_errors: calls.filter(isHarnessError).length,
    context_full_calls: calls.filter(isContextFull).length
  }))
