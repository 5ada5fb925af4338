/**
 * The Rollout Controller in one process: the real local launcher actor running real harness
 * processes (controller-fixtures/), a real verifier, and the Gateway's real SQLite store as the
 * ledger. Groups run to completion with rewards; an infrastructure failure (a harness command
 * that does not exist on the first attempt) is retried as a new attempt; a behaviour failure is
 * not; the admission hook holds rollouts until it allows them; cancel-all leaves every rollout
 * terminal; subscribers get exactly one event per attempt (in-process and over the actor protocol).
 */
import { describe, expect, it } from "@effect/vitest"
import { Store } from "@reins/gateway"
import { type AttemptFinished, type LaunchUpdate, Task, VerifierSpec } from "@reins/protocol"
import { ActorSystem, Probe } from "@reins/runtime"
import { Context, Effect, Exit, Fiber, Layer, Scope, Stream } from "effect"
import { chmodSync, copyFileSync, existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import {
  type AdmissionRequest,
  AttemptLedger,
  makeMemoryLedger,
  ControllerActor,
  controllerActorLayer,
  LauncherActor,
  launcherActorLayer as launcherLayer,
  RolloutController
} from "@reins/rollout/controller"
import { answerTask, baseConfig, controllerFixture, harnessSpec, launcherAndStore, localLayers } from "./controllerHelpers.js"
import { tempDir, waitFor } from "./helpers.js"

const dirs: Array<{ cleanup: () => void }> = []
afterAll(() => dirs.forEach((d) => d.cleanup()))
const freshDir = () => {
  const d = tempDir("controller")
  dirs.push(d)
  return d.dir
}

/** Collects every event of the controller from now on (the subscription is live when this returns). */
const collect = Effect.gen(function*() {
  const controller = yield* RolloutController
  const stream = yield* controller.subscribe
  const events: Array<AttemptFinished> = []
  yield* Effect.forkScoped(Stream.runForEach(stream, (e) => Effect.sync(() => void events.push(e))))
  return events
})

/** Every attempt of the store appears exactly once among the events, and nothing else does. */
const expectOneEventPerAttempt = (events: ReadonlyArray<AttemptFinished>, rolloutIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const store = yield* Store
    const attemptIds: Array<string> = []
    for (const id of rolloutIds) attemptIds.push(...(yield* store.rollout(id)).attempts.map((a) => a.id))
    expect(events.map((e) => e.attemptId).sort()).toEqual(attemptIds.sort())
  })

describe("launcher actor", () => {
  it.scopedLive("reports capacity, refuses launches beyond it, answers the probe's Ping, and cancels", () => {
    const dir = freshDir()
    return Effect.gen(function*() {
      const ref = yield* LauncherActor.ref("rollout/local")
      expect(yield* ref.Capacity()).toMatchObject({ node: "local", kind: "local", max: 1, running: 0 })
      // `reins status`-style probes ping every `rollout/<node>` with the runtime's probe protocol
      const pong = yield* Effect.flatMap(Probe.actor("rollout").ref("rollout/local"), (p) => p.Ping())
      expect(pong).toMatchObject({ actor: "rollout/local", node: "local" })

      const spec = (attemptId: string) => ({
        rolloutId: `r-${attemptId}`,
        attemptId,
        attemptKey: `key-${attemptId}`,
        task: new Task({ id: "hang", input: { mode: "hang" } }),
        harness: harnessSpec({ verifier: undefined }),
        endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" }
      })
      const updates: Array<LaunchUpdate> = []
      const first = yield* Effect.forkScoped(Stream.runForEach(ref.Launch({ spec: spec("a1") }), (u) => Effect.sync(() => void updates.push(u))))
      yield* waitFor(() => updates.length === 1, 20_000)
      expect(updates[0]!._tag).toBe("Started")
      const full = yield* Effect.flip(Stream.runDrain(ref.Launch({ spec: spec("a2") })))
      expect(full).toMatchObject({ _tag: "LauncherFull", max: 1, running: 1 })
      const twice = yield* Effect.flip(Stream.runDrain(ref.Launch({ spec: spec("a1") })))
      expect(twice).toMatchObject({ _tag: "AttemptAlreadyRunning", attemptId: "a1" })
      expect(yield* ref.Cancel({ attemptId: "a1", reason: "enough" })).toBe(true)
      yield* Fiber.join(first)
      const last = updates.at(-1)!
      expect(last._tag === "Finished" && last.result.outcome).toMatchObject({ _tag: "Cancelled", reason: "enough" })
      expect(yield* ref.Cancel({ attemptId: "a1", reason: "again" })).toBe(false)
      expect(yield* ref.Capacity()).toMatchObject({ running: 0 })
    }).pipe(Effect.provide(launcherLayer({ kind: "local", dataDir: dir }, { maxConcurrent: 1 }).pipe(Layer.provideMerge(ActorSystem.layerLocal()))))
  })
})

describe("rollout controller (local launcher, real store)", () => {
  it.scopedLive("runs groups to completion with rewards from the verifier, and pushes events over the actor protocol", () =>
    Effect.gen(function*() {
      const controller = yield* RolloutController
      const store = yield* Store
      const events = yield* collect
      // the same feed over the actor protocol (a Trainer on another node would use this)
      const ref = yield* ControllerActor.client
      const viaActor: Array<AttemptFinished> = []
      yield* Effect.forkScoped(Stream.runForEach(ref.Events(), (e) => Effect.sync(() => void viaActor.push(e))))
      // That feed is live once it has delivered an event; until then, probe rollouts (held by the
      // hook and cancelled while waiting: no process starts) publish one every 20 ms.
      const probes = new Set<string>()
      yield* controller.setAdmission(() => Effect.succeed(false))
      for (let i = 0; viaActor.length === 0; i++) {
        if (i === 500) return yield* Effect.die(new Error("the event feed over the actor protocol never delivered"))
        const probe = yield* controller.submit({ task: answerTask("probe", "0"), size: 1 })
        probes.add(probe.groupId)
        yield* controller.cancel(probe.rolloutIds[0]!, "probing the event feed")
        yield* Effect.sleep("20 millis")
      }
      yield* controller.setAdmission(null)
      const ofGroups = (list: ReadonlyArray<AttemptFinished>) => list.filter((e) => !probes.has(e.groupId))

      const right = yield* controller.submit({ task: answerTask("sum", "4", 100), size: 3, taskExtra: { reference: "4" } })
      const wrong = yield* ref.Submit({ task: answerTask("product", "5"), size: 3, taskExtra: { reference: "6" } })
      const ended = [...(yield* controller.awaitGroup(right.groupId)), ...(yield* ref.AwaitGroup({ groupId: wrong.groupId }))]

      expect(ended.map((e) => [e.groupId, e.state, e.reward, e.attempts])).toEqual([
        ...right.rolloutIds.map(() => [right.groupId, "succeeded", 1, 1]),
        ...wrong.rolloutIds.map(() => [wrong.groupId, "succeeded", 0, 1])
      ])
      for (const id of [...right.rolloutIds, ...wrong.rolloutIds]) {
        const detail = yield* store.rollout(id)
        expect(detail.rollout.state).toBe("succeeded")
        expect(detail.attempts).toHaveLength(1)
        expect(detail.attempts[0]!.reason).toBe("exit code 0")
        expect(detail.rewards.map((r) => r.value)).toEqual([right.rolloutIds.includes(id) ? 1 : 0])
      }
      const real = ofGroups(events)
      expect(real.every((e) => e.final && e.rewardSource === "verifier" && e.outcome._tag === "Succeeded" && e.node === "local")).toBe(true)
      yield* expectOneEventPerAttempt(real, [...right.rolloutIds, ...wrong.rolloutIds])
      // the actor's feed brings the same six (they may still be on their way)
      yield* waitFor(() => ofGroups(viaActor).length >= real.length, 10_000)
      expect(ofGroups(viaActor).map((e) => e.attemptId).sort()).toEqual(real.map((e) => e.attemptId).sort())
      expect((yield* controller.status)).toMatchObject({ waiting: 0, running: 0, ended: 6 + probes.size })
    }).pipe(Effect.provide(controllerActorLayer.pipe(Layer.provideMerge(localLayers({ dir: freshDir() }))))))

  it.scopedLive("retries an infrastructure failure as a new attempt; a behaviour failure is not retried", () => {
    const dir = freshDir()
    const late = join(dir, "late-harness.mjs") // does not exist when the first attempt spawns
    return Effect.gen(function*() {
      const controller = yield* RolloutController
      const store = yield* Store
      const events = yield* collect
      const asked: Array<AdmissionRequest> = []
      // the fixture appears just before the retry is admitted: deterministic "fails to spawn once"
      yield* controller.setAdmission((request) =>
        Effect.sync(() => {
          asked.push(request)
          if (request.attemptIndex === 1 && !existsSync(late)) {
            copyFileSync(controllerFixture("harness.mjs"), late)
            chmodSync(late, 0o755)
          }
          return true
        })
      )
      const flaky = yield* controller.submit({ task: answerTask("flaky", "4"), size: 2, taskExtra: { reference: "4" }, harness: harnessSpec({ command: [late] }) })
      const crash = yield* controller.submit({ task: new Task({ id: "crash", input: { mode: "crash" } }), size: 1 })
      const flakyEnded = yield* controller.awaitGroup(flaky.groupId)
      const [crashEnded] = yield* controller.awaitGroup(crash.groupId)

      expect(flakyEnded.map((e) => [e.state, e.attempts, e.reward])).toEqual([["succeeded", 2, 1], ["succeeded", 2, 1]])
      for (const id of flaky.rolloutIds) {
        const detail = yield* store.rollout(id)
        expect(detail.attempts.map((a) => [a.index, a.state])).toEqual([[0, "failed"], [1, "succeeded"]])
        expect(detail.attempts[0]!.reason).toMatch(/^infra\/spawn: .*\(retried as attempt 2\)$/)
        const mine = events.filter((e) => e.rolloutId === id)
        expect(mine.map((e) => [e.outcome._tag, e.final])).toEqual([["InfraFailed", false], ["Succeeded", true]])
        expect(new Set(mine.map((e) => e.attemptId)).size).toBe(2) // a retry is a NEW attempt
      }
      expect(crashEnded).toMatchObject({ state: "failed", attempts: 1, reward: 0 })
      const crashDetail = yield* store.rollout(crash.rolloutIds[0]!)
      expect(crashDetail.attempts.map((a) => [a.state, a.reason])).toEqual([["failed", "exit code 3"]])
      expect(crashDetail.rollout.reward).toBe(0) // reward policy "zero" for behaviour failures
      expect(events.find((e) => e.rolloutId === crash.rolloutIds[0])).toMatchObject({ final: true, rewardSource: "policy", reward: 0 })
      expect(asked.filter((r) => r.attemptIndex === 1).map((r) => r.rolloutId).sort()).toEqual([...flaky.rolloutIds].sort())
      yield* expectOneEventPerAttempt(events, [...flaky.rolloutIds, ...crash.rolloutIds])
    }).pipe(Effect.provide(localLayers({ dir })))
  })

  it.scopedLive("a timeout is a behaviour failure (not retried); a verifier printing garbage leaves the attempt without reward", () =>
    Effect.gen(function*() {
      const controller = yield* RolloutController
      const store = yield* Store
      const events = yield* collect
      const slow = yield* controller.submit({
        task: new Task({ id: "hang", input: { mode: "hang" } }),
        size: 1,
        harness: harnessSpec({ timeout_s: 1, grace_s: 0.2, verifier: undefined })
      })
      const garbage = yield* controller.submit({
        task: answerTask("sum", "4"),
        size: 1,
        harness: harnessSpec({ verifier: new VerifierSpec({ command: [process.execPath, "-e", "console.log('looks right to me')"] }) })
      })
      const [timedOut] = yield* controller.awaitGroup(slow.groupId)
      expect(timedOut).toMatchObject({ state: "failed", attempts: 1, reward: 0 })
      expect(timedOut!.reason).toMatch(/^timeout: /)
      const [unverified] = yield* controller.awaitGroup(garbage.groupId)
      expect(unverified).toMatchObject({ state: "succeeded", attempts: 1, reward: null })
      const event = events.find((e) => e.rolloutId === garbage.rolloutIds[0])!
      expect(event).toMatchObject({ reward: null, rewardSource: null, final: true })
      expect(event.verifier).toMatchObject({ _tag: "VerifierError", reason: "garbage" })
      expect((yield* store.rollout(garbage.rolloutIds[0]!)).rewards).toEqual([])
    }).pipe(Effect.provide(localLayers({ dir: freshDir() }))))

  it.scopedLive("runs without a Gateway on the in-memory ledger", () => {
    const dir = freshDir()
    const ledger = makeMemoryLedger()
    return Effect.gen(function*() {
      const controller = yield* RolloutController
      const group = yield* controller.submit({ task: answerTask("sum", "4"), size: 2, taskExtra: { reference: "4" } })
      const ended = yield* controller.awaitGroup(group.groupId)
      expect(ended.map((e) => [e.state, e.reward])).toEqual([["succeeded", 1], ["succeeded", 1]])
      expect([...ledger.attempts.values()].map((a) => [a.state, a.reason, a.reward])).toEqual([["succeeded", "exit code 0", 1], ["succeeded", "exit code 0", 1]])
      // only the last ended rollout is remembered (retainEnded: 1); the ledger keeps both
      const ids = group.rolloutIds
      const remembered = yield* Effect.either(controller.awaitRollout(ids[0]!)).pipe(Effect.zip(Effect.either(controller.awaitRollout(ids[1]!))))
      expect(remembered.filter((r) => r._tag === "Right")).toHaveLength(1)
      expect(remembered.find((r) => r._tag === "Left")).toMatchObject({ left: { _tag: "ControllerError" } })
    }).pipe(
      Effect.provide(
        RolloutController.layer(baseConfig({ retainEnded: 1 })).pipe(
          Layer.provideMerge(Layer.merge(launcherLayer({ kind: "local", dataDir: dir }), Layer.succeed(AttemptLedger, ledger))),
          Layer.provideMerge(ActorSystem.layerLocal())
        )
      )
    )
  })

  it.scopedLive("drops behaviour failures from training under the drop policy", () =>
    Effect.gen(function*() {
      const controller = yield* RolloutController
      const store = yield* Store
      const events = yield* collect
      const crash = yield* controller.submit({ task: new Task({ id: "crash", input: { mode: "crash" } }), size: 2 })
      const ended = yield* controller.awaitGroup(crash.groupId)
      expect(ended.map((e) => [e.state, e.reward])).toEqual([["failed", null], ["failed", null]])
      expect(events.map((e) => [e.dropped, e.reward])).toEqual([[true, null], [true, null]])
      for (const id of crash.rolloutIds) expect((yield* store.rollout(id)).rewards).toEqual([])
    }).pipe(Effect.provide(localLayers({ dir: freshDir(), config: { onFailed: "drop" } }))))

  it.scopedLive("holds rollouts the admission hook refuses until it allows them, never dropping one", () =>
    Effect.gen(function*() {
      const controller = yield* RolloutController
      const events = yield* collect
      let budget = 2
      const admitted: Array<string> = []
      yield* controller.setAdmission((request) =>
        Effect.sync(() => {
          if (budget <= 0) return false
          budget--
          admitted.push(request.rolloutId)
          return true
        })
      )
      const group = yield* controller.submit({ task: answerTask("sum", "4"), size: 5, taskExtra: { reference: "4" } })
      yield* waitFor(() => events.length === 2, 20_000)
      // the others wait: nothing more is admitted however long we let it run
      yield* Effect.sleep("600 millis")
      expect(events).toHaveLength(2)
      expect(yield* controller.status).toMatchObject({ waiting: 3, running: 0, admissionBlocked: true })
      budget = 3
      yield* controller.reconsider
      const ended = yield* controller.awaitGroup(group.groupId)
      expect(ended.map((e) => e.state)).toEqual(["succeeded", "succeeded", "succeeded", "succeeded", "succeeded"])
      expect(admitted.sort()).toEqual([...group.rolloutIds].sort())
      expect(events).toHaveLength(5)
    }).pipe(Effect.provide(localLayers({ dir: freshDir() }))))

  it.scopedLive("closing the controller ends its running rollouts (recorded as cancelled, processes gone) and returns", () => {
    const dir = freshDir()
    const runLog = join(dir, "runs.log")
    const started = () => (existsSync(runLog) ? readFileSync(runLog, "utf8").split("\n").filter((l) => l.startsWith("start")) : [])
    return Effect.gen(function*() {
      const store = yield* Store
      const scope = yield* Scope.make()
      const controller = Context.get(yield* Layer.buildWithScope(RolloutController.layer(baseConfig()), scope), RolloutController)
      const hang = yield* controller.submit({
        task: new Task({ id: "hang", input: { mode: "hang" } }),
        size: 3,
        harness: harnessSpec({ env: { RUN_LOG: runLog }, verifier: undefined })
      })
      yield* waitFor(() => started().length === 2, 20_000)
      // Closing used to wait forever: its attempts' fibers were interrupted before the cancel
      // that needs them to settle their rollouts.
      const closed = yield* Scope.close(scope, Exit.void).pipe(Effect.disconnect, Effect.timeout("20 seconds"), Effect.either)
      expect(closed._tag).toBe("Right")
      for (const id of hang.rolloutIds) {
        const detail = yield* store.rollout(id)
        expect(detail.rollout.state).toBe("cancelled")
        for (const a of detail.attempts) {
          expect(a.state).toBe("cancelled")
          expect(a.reason).toMatch(/controller stopped/)
        }
      }
      const pids = started().map((l) => Number(l.split(" ")[3]))
      expect(pids.filter((pid) => pid > 0)).toHaveLength(2)
      for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow()
    }).pipe(Effect.provide(launcherAndStore({ dir, maxConcurrent: 2 })))
  })

  it.scopedLive("cancel and cancel-all leave every rollout in a terminal state, running ones included", () => {
    const dir = freshDir()
    const runLog = join(dir, "runs.log")
    return Effect.gen(function*() {
      const controller = yield* RolloutController
      const store = yield* Store
      const events = yield* collect
      const hang = yield* controller.submit({
        task: new Task({ id: "hang", input: { mode: "hang" } }),
        size: 4,
        harness: harnessSpec({ env: { RUN_LOG: runLog }, verifier: undefined })
      })
      // two run (the launcher's limit), two wait for capacity
      yield* waitFor(() => existsSync(runLog) && readFileSync(runLog, "utf8").split("\n").filter((l) => l.startsWith("start")).length === 2, 20_000)
      expect(yield* controller.cancel(hang.rolloutIds[0]!, "not needed")).toBe(true)
      expect(yield* controller.cancel(hang.rolloutIds[0]!, "again")).toBe(false)
      const cancelled = yield* controller.cancelAll("test over")
      expect(cancelled).toBeGreaterThanOrEqual(2)
      const ended = yield* controller.awaitGroup(hang.groupId)
      expect(ended.map((e) => e.state)).toEqual(["cancelled", "cancelled", "cancelled", "cancelled"])
      for (const id of hang.rolloutIds) {
        const detail = yield* store.rollout(id)
        expect(detail.rollout.state).toBe("cancelled")
        expect(detail.attempts.every((a) => a.state === "cancelled" && a.reason !== null)).toBe(true)
      }
      expect(events.every((e) => e.final && e.state === "cancelled")).toBe(true)
      yield* expectOneEventPerAttempt(events, hang.rolloutIds)
      expect(yield* controller.status).toMatchObject({ waiting: 0, running: 0, ended: 4 })
    }).pipe(Effect.provide(localLayers({ dir, maxConcurrent: 2 })))
  })
})
