/**
 * `reins train CONFIG [--resume RUN_DIR] [--max-versions N] [--no-eval]`: a whole training run on
 * this machine (see run/train.ts), with a progress line per version and the summary at the end.
 */
import { Args, Command, Options } from "@effect/cli"
import type { TrainerEvent } from "@reins/trainer"
import { trainerConfig } from "@reins/trainer"
import { Console, Effect, Option, Schema } from "effect"
import { TrainerConfig } from "@reins/protocol"
import { loadRunConfig, RunConfig, EvalConfig } from "../run/RunConfig.js"
import { failWith } from "./node.js"

const config = Args.file({ name: "config", exists: "yes" }).pipe(
  Args.withDescription("The run's config: JSON, or a JS/TS module whose default export is the config object.")
)
const resume = Options.directory("resume", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription("Continue this run folder (runs/<id>) from its newest checkpoint.")
)
const maxVersions = Options.integer("max-versions").pipe(
  Options.optional,
  Options.withDescription("Override the config's trainer.max_versions.")
)
const noEval = Options.boolean("no-eval").pipe(Options.withDescription("Skip the base and final evaluations."))

const pct = (x: number | null) => (x === null ? "  n/a" : `${(100 * x).toFixed(0).padStart(4)}%`)

/** One line per version: a bar over versions, reward, pass rate, tokens/s, staleness, pause. */
export const progressLine = (event: TrainerEvent, total: number | undefined): string | null => {
  if (event._tag === "Skipped") return `  (batch of ${event.groups} groups skipped at version ${event.version}: ${event.reason})`
  if (event._tag === "Checkpoint") return null
  const m = event.metrics
  const width = 20
  const done = total === undefined ? 0 : Math.round((width * Math.min(m.version, total)) / total)
  const bar = total === undefined ? "" : `[${"#".repeat(done)}${".".repeat(width - done)}] `
  const tps = m.wallSeconds > 0 ? Math.round(m.used.tokens / m.wallSeconds) : 0
  return `${bar}v${m.version}${total === undefined ? "" : `/${total}`}  reward ${m.reward.mean?.toFixed(2) ?? "n/a"}  pass ${pct(m.reward.passRate)}  ` +
    `${tps} tok/s  staleness ≤${m.staleness.max}  pause ${m.pause.pauseSeconds.toFixed(1)}s  ${m.wallSeconds.toFixed(1)}s`
}

export const trainCommand = Command.make("train", { config, resume, maxVersions, noEval }, (args) =>
  Effect.gen(function*() {
    const loaded = yield* loadRunConfig(args.config)
    const trainer = Option.match(args.maxVersions, {
      onNone: () => loaded.trainer,
      onSome: (n) => trainerConfig({ ...Schema.encodeSync(TrainerConfig)(loaded.trainer), max_versions: n })
    })
    const run = args.noEval ? new RunConfig({ ...loaded.run, eval: new EvalConfig({ ...loaded.run.eval, enabled: false }) }) : loaded.run
    // Loaded on use: the other commands need neither the Gateway nor the controller at start-up.
    const { train } = yield* Effect.promise(() => import("../run/train.js"))
    const result = yield* train({
      run,
      trainer,
      resumeDir: Option.getOrUndefined(args.resume),
      log: (line) => Console.log(line),
      onEvent: (event) => {
        const line = progressLine(event, trainer.max_versions)
        return line === null ? Effect.void : Console.log(line)
      }
    })
    const s = result.summary
    yield* Console.log(
      `done: ${s.versions} versions in ${s.wall_s.toFixed(0)} s; test pass@1 ${pct(s.base_pass_at_1)} → ${pct(s.final_pass_at_1)}, ` +
        `greedy ${pct(s.base_greedy_pass_at_1)} → ${pct(s.final_greedy_pass_at_1)}; ${s.harness_errors} harness errors`
    )
    yield* Console.log(`report: ${result.runDir}/report.md`)
  }).pipe(failWith("reins train"))
).pipe(Command.withDescription("Train an agent through its harness on this machine (all roles in one process)."))
