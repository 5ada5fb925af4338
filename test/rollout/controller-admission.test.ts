/**
 * Remote admission: a Trainer on another node bounds staleness with the start budget
 * (`SetAdmission` over a real cross-node websocket connection). Two nodes in this process: `a`
 * hosts the controller (memory ledger), its actor and a local launcher actor; `b` only calls.
 * The budget counts started rollouts, a retry of a started rollout does not consume it, and the
 * in-process admission hook applies as well (an attempt starts only if both allow it).
 */
import { describe, expect, it } from "@effect/vitest"
import type { AttemptFinished, ControllerStatus } from "@reins/protocol"
import {
  type AdmissionRequest,
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
      const refused: Array<AdmissionRequest> = []
      yield* controller.setAdmission((request) =>
        Effect.sync(() => {
          if (request.attemptIndex === 1 && !existsSync(late)) {
            copyFileSync(controllerFixture("harness.mjs"), late)
            chmodSync(late, 0o755)
          }
          if (hold) refused.push(request)
          return !hold
        })
      )
      // Polls the status until `decided` says the controller has made up its mind either way (so
      // a slow machine only makes the wait longer, never the check weaker).
      const statusOnce = (decided: (s: ControllerStatus) => boolean) =>
        Effect.gen(function*() {
          for (let i = 0; i < 1_000; i++) {
            const s = yield* trainer.Status()
            if (decided(s)) return s
            yield* Effect.sleep("20 millis")
          }
          return yield* Effect.die(new Error("the controller never decided"))
        })

      expect(yield* trainer.SetAdmission({ budget: 1 })).toMatchObject({ budget: 1, started: 0 })
      // one start allowed: the flaky rollout takes it; its retry (a new attempt) needs no budget
      const flaky = yield* controller.submit({ task: answerTask("flaky", "4"), size: 1, taskExtra: { reference: "4" }, harness: harnessSpec({ command: [late] }) })
      const [flakyEnded] = yield* controller.awaitGroup(flaky.groupId)
      expect(flakyEnded).toMatchObject({ state: "succeeded", attempts: 2, reward: 1 })

      // A scheduling pass that finds a waiting rollout over budget says so (admissionBlocked); one
      // that ignored the budget would start it instead.
      const group = yield* trainer.Submit({ task: answerTask("sum", "4"), size: 3, taskExtra: { reference: "4" } })
      expect(yield* statusOnce((s) => s.admissionBlocked || s.waiting < 3)).toMatchObject({ waiting: 3, started: 1, budget: 1, admissionBlocked: true })

      // the budget allows two more, but the hook holds them: once it has refused the group's first
      // rollout (asked only because the budget let it through), nothing of the group has started
      hold = true
      expect(yield* trainer.SetAdmission({ budget: 3 })).toMatchObject({ budget: 3, started: 1 })
      yield* waitFor(() => refused.some((r) => r.groupId === group.groupId), 20_000)
      expect(refused.every((r) => r.groupId === group.groupId && r.rolloutId === group.rolloutIds[0])).toBe(true) // the oldest first, never overtaken
      expect(yield* trainer.Status()).toMatchObject({ waiting: 3, started: 1, admissionBlocked: true })
      hold = false
      yield* controller.reconsider
      yield* waitFor(() => events.filter((e) => e.groupId === group.groupId).length === 2, 20_000)
      // the two have ended (not just reported), and a pass has seen the third over budget with
      // free slots: it would have started it then
      const two = events.filter((e) => e.groupId === group.groupId).map((e) => e.rolloutId)
      yield* Effect.forEach(two, (id) => controller.awaitRollout(id))
      expect(yield* statusOnce((s) => s.admissionBlocked || s.waiting < 1)).toMatchObject({ waiting: 1, running: 0, started: 3, admissionBlocked: true })

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
