/**
 * pass@1 through the real harness and Gateway: every held-out task runs `samples` times at the
 * harness's own temperature (sampled pass@1 = the mean pass rate over tasks and samples), and
 * once with the harness's greedy setting when the config names one. Evaluation rollouts are
 * recorded like any other but never trained on.
 */
import { HarnessSpec } from "@reins/protocol"
import type { RolloutControllerService } from "@reins/rollout/controller"
import type { TaskItem } from "@reins/trainer"
import { Effect } from "effect"

export interface EvalOptions {
  readonly tasks: ReadonlyArray<TaskItem>
  readonly harness: HarnessSpec
  readonly samples: number
  readonly greedyEnv: Readonly<Record<string, string>> | undefined
  /** A rollout passes when its reward is at least this. */
  readonly passThreshold: number
}

export interface EvalResult {
  readonly tasks: number
  /** Mean pass rate over tasks × samples; null without tasks. */
  readonly passAt1: number | null
  readonly greedyPassAt1: number | null
  readonly rollouts: number
  /** Rollouts that ended failed or cancelled (harness errors, timeouts). */
  readonly harnessErrors: number
  readonly seconds: number
}

/** Runs `tasks` with `size` rollouts each and returns, per rollout, whether it passed. */
const passes = (controller: RolloutControllerService, options: EvalOptions, size: number, env: Readonly<Record<string, string>>) =>
  Effect.forEach(
    options.tasks,
    (item) =>
      Effect.gen(function*() {
        const harness = new HarnessSpec({ ...options.harness, env: { ...options.harness.env, ...env } })
        const group = yield* controller.submit({ task: item.task, taskExtra: item.extra, size, harness })
        return yield* controller.awaitGroup(group.groupId)
      }),
    { concurrency: "unbounded" }
  ).pipe(Effect.map((groups) => groups.flat()))

const rate = (ended: ReadonlyArray<{ readonly reward: number | null }>, threshold: number) =>
  ended.length === 0 ? null : ended.filter((e) => e.reward !== null && e.reward >= threshold).length / ended.length

export const evaluate = (controller: RolloutControllerService, options: EvalOptions) =>
  Effect.gen(function*() {
    const started = performance.now()
    const sampled = yield* passes(controller, options, options.samples, {})
    const greedy = options.greedyEnv === undefined ? [] : yield* passes(controller, options, 1, options.greedyEnv)
    const all = [...sampled, ...greedy]
    return {
      tasks: options.tasks.length,
      passAt1: rate(sampled, options.passThreshold),
      greedyPassAt1: options.greedyEnv === undefined ? null : rate(greedy, options.passThreshold),
      rollouts: all.length,
      harnessErrors: all.filter((e) => e.state !== "succeeded").length,
      seconds: (performance.now() - started) / 1000
    } satisfies EvalResult
  })
