/**
 * The configuration of `reins train CONFIG`: what to train (a model directory), on which tasks,
 * through which harness, with which Trainer settings, and how to evaluate before and after.
 * Written by users in JSON (or a JS/TS module's default export), so keys are snake_case like the
 * harness spec and the Trainer's config; unknown keys are errors naming the key. Relative input
 * paths (model, tasks, the harness's cwd) are resolved against the config file's folder, output
 * folders (`runs_dir`, `data_dir`) against the current directory.
 */
import { REASONING_PARSERS, TOOL_PARSERS } from "@reins/policy/text"
import { HarnessSpec, type TrainerConfig } from "@reins/protocol"
import { decodeTrainerConfig, type TrainerConfigError } from "@reins/trainer"
import { Data, Effect, Either, ParseResult, Schema } from "effect"
import { existsSync, readFileSync } from "node:fs"
import path from "node:path"
import { pathToFileURL } from "node:url"

const PositiveInt = Schema.Int.pipe(Schema.positive())
const EnvVars = Schema.Record({ key: Schema.String, value: Schema.String })

export class EvalConfig extends Schema.Class<EvalConfig>("EvalConfig")({
  /** The held-out tasks (JSONL); default: `tasks` with `split: "test"`. */
  tasks: Schema.optional(Schema.String),
  /** Samples per task at the harness's own temperature (sampled pass@1 = mean over them). */
  samples: Schema.optionalWith(PositiveInt, { default: () => 4 }),
  /** Environment that makes the harness decode greedily (e.g. `{"CALC_TEMPERATURE": "0"}`); none: no greedy evaluation. */
  greedy_env: Schema.optional(EnvVars),
  /** Evaluate at most this many tasks (the first ones of the file). */
  limit: Schema.optional(PositiveInt),
  /** Evaluate the base policy before training and the final one after (default true). */
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => true })
}) {}

export class RunConfig extends Schema.Class<RunConfig>("RunConfig")({
  /** Used in the run's id (`runs/<time>-<name>`). */
  name: Schema.optionalWith(Schema.String, { default: () => "run" }),
  /** The base policy's model directory. */
  model: Schema.String,
  /** Tool-call parser of a Hugging Face template, by vLLM's name (hermes, llama3_json, mistral); default: detected. */
  tool_parser: Schema.optional(Schema.Literal(...TOOL_PARSERS, "auto")),
  /** Reasoning parser (qwen3, none); default: detected from the template. */
  reasoning_parser: Schema.optional(Schema.Literal(...REASONING_PARSERS, "auto")),
  /** The task set (JSONL); training uses its `train` split. */
  tasks: Schema.String,
  harness: HarnessSpec,
  /** Trainer settings (see @reins/trainer's README); validated by `decodeTrainerConfig`. */
  trainer: Schema.optionalWith(Schema.Unknown, { default: () => ({}) }),
  /** Harness processes at once. */
  concurrency: Schema.optionalWith(PositiveInt, { default: () => 8 }),
  eval: Schema.optionalWith(EvalConfig, { default: () => new EvalConfig({}) }),
  /** Where runs go (`<runs_dir>/<id>/`). */
  runs_dir: Schema.optionalWith(Schema.String, { default: () => "runs" }),
  /** Where the store and the attempts' files go (per run: `<data_dir>/<id>/`). */
  data_dir: Schema.optionalWith(Schema.String, { default: () => ".reins/runs" })
}) {}

export class RunConfigError extends Data.TaggedError("RunConfigError")<{ readonly message: string }> {}

/**
 * A config module. The compiled CLI loads a TypeScript one through tsx (an optional peer
 * dependency); from the sources (tests) it is imported as it is.
 */
const importConfig = async (file: string): Promise<{ default?: unknown }> => {
  const url = pathToFileURL(file).href
  if (/\.m?ts$/.test(file) && !import.meta.url.endsWith(".ts")) {
    const tsx = await import("tsx/esm/api").catch(() => undefined)
    if (tsx === undefined) throw new Error("a TypeScript config needs tsx installed (npm install tsx); or write it as .json or .js")
    return (await tsx.tsImport(url, import.meta.url)) as { default?: unknown }
  }
  return (await import(url)) as { default?: unknown }
}

const load = (file: string): Effect.Effect<unknown, RunConfigError> =>
  /\.(m?[jt]s)$/.test(file)
    ? Effect.tryPromise({
      try: async () => (await importConfig(file)).default,
      catch: (e) => new RunConfigError({ message: `cannot load ${file}: ${e instanceof Error ? e.message : String(e)}` })
    })
    : Effect.try({
      try: () => JSON.parse(readFileSync(file, "utf8")) as unknown,
      catch: (e) => new RunConfigError({ message: `cannot read ${file}: ${e instanceof Error ? e.message : String(e)}` })
    })

/** Resolves a path from the config against the config's folder. */
const resolveFrom = (base: string, p: string) => (path.isAbsolute(p) ? p : path.resolve(base, p))

/** Paths of the config made absolute, the harness's `cwd` defaulting to the config's folder. */
const resolvePaths = (config: RunConfig, base: string): RunConfig =>
  new RunConfig({
    ...config,
    model: resolveFrom(base, config.model),
    tasks: resolveFrom(base, config.tasks),
    harness: new HarnessSpec({ ...config.harness, cwd: resolveFrom(base, config.harness.cwd ?? ".") }),
    eval: new EvalConfig({ ...config.eval, ...(config.eval.tasks === undefined ? {} : { tasks: resolveFrom(base, config.eval.tasks) }) }),
    runs_dir: path.resolve(config.runs_dir),
    data_dir: path.resolve(config.data_dir)
  })

/** Reads, validates and resolves a run config; the Trainer section is decoded too (errors name the key). */
export const loadRunConfig = (file: string): Effect.Effect<{ readonly run: RunConfig; readonly trainer: TrainerConfig }, RunConfigError | TrainerConfigError> =>
  Effect.gen(function*() {
    const absolute = path.resolve(file)
    if (!existsSync(absolute)) return yield* new RunConfigError({ message: `config file not found: ${file}` })
    const raw = yield* load(absolute)
    const decoded = Schema.decodeUnknownEither(RunConfig)(raw, { onExcessProperty: "error", errors: "all" })
    if (Either.isLeft(decoded)) {
      return yield* new RunConfigError({ message: `${file}: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}` })
    }
    const run = resolvePaths(decoded.right, path.dirname(absolute))
    const trainer = yield* decodeTrainerConfig(run.trainer)
    return { run, trainer }
  })
