/**
 * Scripting a run from an Effect program: train the calc agent for a few versions, evaluate,
 * lower the learning rate, train on (the task order and the weights carry over), evaluate again,
 * and look at one recorded rollout. Every failure is a typed error.
 *
 *   npx tsx examples/scripted/train.ts [VERSIONS]
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Stream } from "effect"
import { EvalConfig, loadRunConfig, Reins, RunConfig, trainerConfig } from "reins"

const versions = Number(process.argv[2] ?? "3")

const program = Effect.gen(function*() {
  const reins = yield* Reins.Reins
  yield* Console.log(`Gateway at ${reins.openaiBaseUrl}, run folder ${reins.runDir}`)

  // Follow the run as it goes.
  yield* Effect.forkScoped(
    Stream.runForEach(reins.events, (e) =>
      e._tag === "Version" ? Console.log(`version ${e.metrics.version}: reward ${e.metrics.reward.mean?.toFixed(2)}`) : Effect.void)
  )

  const base = yield* reins.evaluate()
  yield* Console.log(`base: pass@1 ${base.passAt1}, greedy ${base.greedyPassAt1}`)

  yield* reins.train(trainerConfig({ batch_groups: 4, group_size: 8, lr: 3e-4, std_scaling: true, max_versions: versions }))
  const first = yield* reins.evaluate()
  yield* Console.log(`after ${versions} versions: pass@1 ${first.passAt1}`)

  // Change a hyper-parameter and continue from the same weights and task order.
  yield* reins.train(trainerConfig({ batch_groups: 4, group_size: 8, lr: 1e-4, std_scaling: true, max_versions: versions }))
  const second = yield* reins.evaluate()
  yield* Console.log(`after ${2 * versions} versions: pass@1 ${second.passAt1} (version ${yield* reins.version})`)

  // What was recorded: the newest rollout, its calls and their exact tokens.
  const page = yield* reins.stack.store.rollouts({ limit: 1 })
  const newest = page.rollouts[0]
  if (newest !== undefined) {
    const detail = yield* reins.stack.store.rollout(newest.id)
    yield* Console.log(`rollout ${newest.id}: reward ${newest.reward}, ${detail.calls.length} calls, versions ${detail.calls.map((c) => [...new Set(c.versions)].join("/")).join(", ")}`)
  }
})

const main = Effect.gen(function*() {
  const { run } = yield* loadRunConfig(new URL("../calc/reins.config.json", import.meta.url).pathname)
  // Evaluate on the first 20 test tasks only, to keep the example quick.
  const quick = new RunConfig({ ...run, eval: new EvalConfig({ ...run.eval, limit: 20, samples: 2 }) })
  return yield* program.pipe(Effect.scoped, Effect.provide(Reins.local({ run: quick })))
})

NodeRuntime.runMain(main)
