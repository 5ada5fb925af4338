/**
 * Remote admission: a Trainer on another node bounds staleness with the start budget
 * (`SetAdmission` over a real cross-node websocket connection). Two nodes in this process: `a`
 * hosts the controller (memory ledger), its actor and a local launcher actor; `b` only calls.
 * The budget counts started rollouts, a retry of a started rollout does not consume it, and the
 * in-process admission hook applies as well (an attempt starts only if both allow it).
 */
import { describe, expect, it } from "@effect/vitest"
import type { AttemptFinished } from "@reins/protocol"
import {
  AttemptLedger,
  ControllerActor,
  controllerActorLayer,
  launcherActorLayer,
  RolloutController
} from "@reins/rollout/controller"
import { ActorSystem, Node } from "@reins/runtime"
import { Context, Effect, Exit, Layer, Redacted, Schedule, Scope, Stream } from "effect"
import { chmodSync, copyFileSync, existsSync } from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import { answerTask, baseConfig, controllerFixture, harnessSpec } from "./controllerHelpers.js"
import { tempDir, waitFor } from "./helpers.js"

const data = tempDir("admission")
afterAll(() => data.cleanup())
const secret = Redacted.make("admission-test-secret-0123456789")

const build = <A, E>(layer: Layer.Layer<A, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    return yield* Layer.buildWithScope(layer, scope).pipe(Effect.orDie)
  })

describe("remote admission (start budget)", () => {
  it.scopedLive("a Trainer on another node sets the start budget; retries are free; the in-process hook applies too", () =>
    Effect.gen(function*() {
      const late = join(data.dir, "late-harness.mjs") // missing at the first attempt: an infrastructure failure
      const nodeA = Node.layer({ dataDir: join(data.dir, "a"), secret, downAfter: "5 seconds" }, Layer.empty)
      const a = yield* build(
        Layer.merge(controllerActorLayer, launcherActorLayer({ kind: "local", dataDir: join(data.dir, "launcher") }, { maxConcurrent: 4 })).pipe(
          Layer.provideMerge(RolloutController.layer(baseConfig())),
          Layer.provideMerge(Layer.merge(nodeA, AttemptLedger.memory()))
        )
      )
      const controller = Context.get(a, RolloutController)
      const b = yield* build(Node.layer({ dataDir: join(data.dir, "b"), secret, join: [Context.get(a, Node.CurrentNode).address], downAfter: "5 seconds" }, Layer.empty))
      const trainer = yield* Effect.provideService(ControllerActor.client, ActorSystem, Context.get(b, ActorSystem))
      // b learns where `controller` runs
      yield* trainer.Status().pipe(Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("15 seconds"))))
      const events: Array<AttemptFinished> = []
      yield* Effect.forkScoped(Stream.runForEach(trainer.Events(), (e) => Effect.sync(() => void events.push(e))))
      yield* Effect.sleep("100 millis")

      // the in-process hook, next to the budget: it fixes the harness before a retry, and can hold everything
      let hold = false
      yield* controller.setAdmission((request) =>
        Effect.sync(() => {
          if (request.attemptIndex === 1 && !existsSync(late)) {
            copyFileSync(controllerFixture("harness.mjs"), late)
            chmodSync(late, 0o755)
          }
          return !hold
        })
      )

      expect(yield* trainer.SetAdmission({ budget: 1 })).toMatchObject({ budget: 1, started: 0 })
      // one start allowed: the flaky rollout takes it; its retry (a new attempt) needs no budget
      const flaky = yield* controller.submit({ task: answerTask("flaky", "4"), size: 1, taskExtra: { reference: "4" }, harness: harnessSpec({ command: [late] }) })
      const [flakyEnded] = yield* controller.awaitGroup(flaky.groupId)
      expect(flakyEnded).toMatchObject({ state: "succeeded", attempts: 2, reward: 1 })

      const group = yield* trainer.Submit({ task: answerTask("sum", "4"), size: 3, taskExtra: { reference: "4" } })
      yield* Effect.sleep("500 millis")
      expect(yield* trainer.Status()).toMatchObject({ waiting: 3, started: 1, budget: 1, admissionBlocked: true })

      // the budget allows two more, but the hook holds them
      hold = true
      expect(yield* trainer.SetAdmission({ budget: 3 })).toMatchObject({ budget: 3, started: 1 })
      yield* Effect.sleep("500 millis")
      expect(yield* trainer.Status()).toMatchObject({ waiting: 3, started: 1, admissionBlocked: true })
      hold = false
      yield* controller.reconsider
      yield* waitFor(() => events.filter((e) => e.groupId === group.groupId).length === 2, 20_000)
      yield* Effect.sleep("300 millis")
      expect(yield* trainer.Status()).toMatchObject({ waiting: 1, running: 0, started: 3, admissionBlocked: true })

      // unlimited: the last one runs
      yield* trainer.SetAdmission({ budget: null })
      const ended = yield* trainer.AwaitGroup({ groupId: group.groupId }).pipe(Effect.timeout("20 seconds"))
      expect(ended.map((e) => [e.state, e.attempts, e.reward])).toEqual([["succeeded", 1, 1], ["succeeded", 1, 1], ["succeeded", 1, 1]])
      expect(yield* trainer.Status()).toMatchObject({ started: 4, budget: null, admissionBlocked: false })

      // bad budgets are refused with a clear error, remotely and in-process
      expect(yield* Effect.flip(trainer.SetAdmission({ budget: -1 }))).toMatchObject({ message: expect.stringMatching(/greater than or equal to 0|non-negative/) })
      expect(yield* Effect.flip(controller.setBudget(1.5))).toMatchObject({ _tag: "ControllerError", message: expect.stringMatching(/non-negative integer/) })
    }), { timeout: 60_000 })
})
