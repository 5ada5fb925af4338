/**
 * `reins eval --model DIR (--harness NAME | --config FILE) [--split test] [-n K] [--limit N]`:
 * pass@1 of a policy through the real harness and Gateway — each task run K times at the
 * harness's own temperature (sampled pass@1), and once greedily when the config says how.
 * `--harness NAME` uses `examples/NAME/reins.config.json`.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { existsSync } from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { failWith } from "./node.js"

const model = Options.directory("model", { exists: "yes" }).pipe(Options.optional, Options.withDescription("The policy to evaluate (default: the config's model)."))
const harness = Options.text("harness").pipe(Options.optional, Options.withDescription("An example harness by name (calc, mini-swe): uses examples/NAME/reins.config.json."))
const config = Options.file("config", { exists: "yes" }).pipe(Options.optional, Options.withDescription("A run config (see `reins train`)."))
const split = Options.choice("split", ["test", "train"]).pipe(Options.withDefault("test" as const), Options.withDescription("Which tasks to run."))
const samples = Options.integer("n").pipe(Options.optional, Options.withDescription("Samples per task (default: the config's eval.samples)."))
const limit = Options.integer("limit").pipe(Options.optional, Options.withDescription("Evaluate only the first N tasks."))
const json = Options.boolean("json").pipe(Options.withDescription("Print the result as JSON."))

const exampleConfig = (name: string) => fileURLToPath(new URL(`../../../../examples/${name}/reins.config.json`, import.meta.url))

const configFile = (args: { harness: Option.Option<string>; config: Option.Option<string> }) =>
  Option.match(args.config, {
    onSome: (file) => (Option.isSome(args.harness) ? Effect.fail(new Error("--harness and --config exclude each other")) : Effect.succeed(file)),
    onNone: () =>
      Option.match(args.harness, {
        onNone: () => Effect.fail(new Error("say what to run: --harness NAME (an example) or --config FILE")),
        onSome: (name) =>
          existsSync(exampleConfig(name)) ? Effect.succeed(exampleConfig(name)) : Effect.fail(new Error(`no example harness named ${name} (examples/${name}/reins.config.json)`))
      })
  })

export const evalCommand = Command.make("eval", { model, harness, config, split, samples, limit, json }, (args) =>
  Effect.gen(function*() {
    // Loaded on use, so `reins --help` and the other commands start fast.
    const { EvalConfig, loadRunConfig, RunConfig } = yield* Effect.promise(() => import("../run/RunConfig.js"))
    const { run, trainer } = yield* loadRunConfig(yield* configFile(args))
    const evalConfig = new EvalConfig({
      ...run.eval,
      // The train split: the training task file, read as test tasks.
      ...(args.split === "train" ? { tasks: run.tasks } : {}),
      ...(Option.isSome(args.samples) ? { samples: args.samples.value } : {}),
      ...(Option.isSome(args.limit) ? { limit: args.limit.value } : {})
    })
    const evaluated = new RunConfig({ ...run, model: Option.getOrElse(args.model, () => run.model), eval: evalConfig })
    const { Reins } = yield* Effect.promise(() => import("../index.js"))
    const result = yield* Effect.flatMap(Reins.Reins, (r) => r.evaluate(trainer.pass_threshold, args.split === "train" ? "train" : "test")).pipe(
      // An evaluation writes no run folder: its store and logs go under the data directory.
      Effect.provide(Reins.local({ run: evaluated, runDir: path.join(evaluated.data_dir, "evals", `${Date.now()}`) }))
    )
    const pct = (x: number | null) => (x === null ? "n/a" : `${(100 * x).toFixed(1)}%`)
    yield* Console.log(
      args.json
        ? JSON.stringify(result)
        : `${evaluated.model}: pass@1 ${pct(result.passAt1)} (${evalConfig.samples} samples × ${result.tasks} tasks), greedy ${pct(result.greedyPassAt1)}; ` +
          `${result.harnessErrors} harness errors; ${result.seconds.toFixed(0)} s`
    )
  }).pipe(failWith("reins eval"))).pipe(Command.withDescription("Measure pass@1 of a policy through the real harness and Gateway."))
