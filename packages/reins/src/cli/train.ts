/**
 * `reins train CONFIG [--resume RUN_DIR] [--max-versions N] [--no-eval]`: a whole training run on
 * this machine (see run/train.ts), with a progress line per version and the summary at the end.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type { describeFailures, TrainerEvent } from "@reins/trainer"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { failWith, parseListen } from "./node.js"

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
const join = Options.text("join").pipe(
  Options.repeated,
  Options.withDescription("ws://HOST:PORT of a cluster member: run as the cluster's gateway+trainer node; harnesses also run on its `rollout` nodes.")
)
const listen = Options.text("listen").pipe(
  Options.withDefault("127.0.0.1:0"),
  Options.withDescription("With --join: HOST:PORT this node listens on for peers.")
)
const advertise = Options.text("advertise").pipe(
  Options.optional,
  Options.withDescription("With --join: ws://HOST:PORT other nodes use to reach this one (default: from --listen; in a pod, its IP).")
)
const nodeData = Options.directory("node-data").pipe(
  Options.withDefault(".reins/train-node"),
  Options.withDescription("With --join: this node's data directory (node id, lock, cluster secret).")
)
const secretFile = Options.file("secret-file", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription("With --join: the cluster secret file (default: $REINS_CLUSTER_SECRET, else NODE_DATA/cluster-secret).")
)
const noLocalRollouts = Options.boolean("no-local-rollouts").pipe(
  Options.withDescription("With --join: run no harness on this node, only on the cluster's rollout nodes.")
)
const gatewayHttp = Options.text("gateway-http").pipe(
  Options.withDefault("127.0.0.1:0"),
  Options.withDescription("HOST:PORT the Gateway listens on (rollout nodes on other machines must reach it).")
)
const publicUrl = Options.text("public-url").pipe(
  Options.optional,
  Options.withDescription("The Gateway's /v1 URL as harnesses should use it (default: from --gateway-http).")
)

const trainOptions = { config, resume, maxVersions, noEval, join, listen, advertise, nodeData, secretFile, noLocalRollouts, gatewayHttp, publicUrl }
export type TrainArgs = Command.Command.ParseConfig<typeof trainOptions>

const clusterOptions = (args: TrainArgs) =>
  Effect.gen(function*() {
    const http = yield* parseListen(args.gatewayHttp)
    if (args.join.length === 0) {
      if (args.noLocalRollouts) return yield* Effect.fail(new Error("--no-local-rollouts needs --join: without a cluster nothing would run the harnesses"))
      return { http, publicUrl: Option.getOrUndefined(args.publicUrl) }
    }
    const { host, port } = yield* parseListen(args.listen)
    return {
      http,
      publicUrl: Option.getOrUndefined(args.publicUrl),
      cluster: {
        node: {
          host,
          port,
          join: args.join,
          roles: ["gateway", "trainer"],
          dataDir: args.nodeData,
          ...(Option.isSome(args.secretFile) ? { secretFile: args.secretFile.value } : {}),
          ...(Option.isSome(args.advertise) ? { advertise: args.advertise.value } : {})
        },
        localLauncher: !args.noLocalRollouts
      }
    }
  })

const pct = (x: number | null) => (x === null ? "  n/a" : `${(100 * x).toFixed(0).padStart(4)}%`)

/**
 * One line per version: a bar over the run's updates (`done` of `total`), the version, reward,
 * pass rate, tokens/s, staleness, pause; then, if any attempt of the batch failed, how many and
 * their most common reason (a skipped batch too: "no trainable samples" alone hides why).
 */
export const progressLine = (
  event: TrainerEvent,
  done: number,
  total: number | undefined,
  describe: typeof describeFailures
): string | null => {
  if (event._tag === "Checkpoint") return null
  const failed = describe(event.failures)
  const failures = failed === "" ? "" : `\n    ${failed}`
  if (event._tag === "Skipped") return `  (batch of ${event.groups} groups skipped at version ${event.version}: ${event.reason})${failures}`
  const m = event.metrics
  const width = 20
  const filled = total === undefined ? 0 : Math.round((width * Math.min(done, total)) / total)
  const bar = total === undefined ? "" : `[${"#".repeat(filled)}${".".repeat(width - filled)}] ${done}/${total} `
  const tps = m.wallSeconds > 0 ? Math.round(m.used.tokens / m.wallSeconds) : 0
  return `${bar}v${m.version}  reward ${m.reward.mean?.toFixed(2) ?? "n/a"}  pass ${pct(m.reward.passRate)}  ` +
    `${tps} tok/s  staleness ≤${m.staleness.max}  pause ${m.pause.pauseSeconds.toFixed(1)}s  ${m.wallSeconds.toFixed(1)}s${failures}`
}

/** Runs `reins train` with parsed arguments (also what `reins start` runs on the calc example). */
export const runTrain = (args: TrainArgs) =>
  Effect.gen(function*() {
    // Loaded on use, so `reins --help` and the other commands start fast.
    const { describeFailures, trainerConfig } = yield* Effect.promise(() => import("@reins/trainer"))
    const { TrainerConfig } = yield* Effect.promise(() => import("@reins/protocol"))
    const { loadRunConfig, RunConfig, EvalConfig } = yield* Effect.promise(() => import("../run/RunConfig.js"))
    const network = yield* clusterOptions(args)
    const loaded = yield* loadRunConfig(args.config)
    const trainer = Option.match(args.maxVersions, {
      onNone: () => loaded.trainer,
      onSome: (n) => trainerConfig({ ...Schema.encodeSync(TrainerConfig)(loaded.trainer), max_versions: n })
    })
    const run = args.noEval ? new RunConfig({ ...loaded.run, eval: new EvalConfig({ ...loaded.run.eval, enabled: false }) }) : loaded.run
    // Loaded on use: the Gateway and the controller.
    const { train } = yield* Effect.promise(() => import("../run/train.js"))
    /** Updates of the run so far, as `max_versions` counts them (a resumed run's included). */
    let updates = 0
    let resumedAt = 0
    const result = yield* train({
      run,
      trainer,
      resumeDir: Option.getOrUndefined(args.resume),
      ...network,
      log: (line) => Console.log(line),
      onResume: (versions) => Effect.sync(() => void (updates = resumedAt = versions)),
      onEvent: (event) => {
        if (event._tag === "Version") updates++
        const line = progressLine(event, updates, trainer.max_versions, describeFailures)
        return line === null ? Effect.void : Console.log(line)
      }
    })
    const s = result.summary
    yield* Console.log(
      `done: ${s.versions} versions${resumedAt > 0 ? ` (${s.versions - resumedAt} by this process)` : ""} in ${s.wall_s.toFixed(0)} s; test pass@1 ${pct(s.base_pass_at_1)} → ${pct(s.final_pass_at_1)}, ` +
        `greedy ${pct(s.base_greedy_pass_at_1)} → ${pct(s.final_greedy_pass_at_1)}; ${s.harness_errors} harness errors` +
        (s.context_full_calls > 0 ? ` (${s.context_full_calls} calls ended episodes at the model's context limit)` : "")
    )
    yield* Console.log(`report: ${result.runDir}/report.md`)
  })

export const trainCommand = Command.make(
  "train",
  trainOptions,
  (args) => runTrain(args).pipe(failWith("reins train"))
).pipe(Command.withDescription("Train an agent through its harness on this machine, or as the gateway+trainer node of a cluster (--join)."))
