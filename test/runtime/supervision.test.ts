/** Supervision: backoff, restart limits, escalation, and defect isolation between actors. */
import { describe, expect, it } from "@effect/vitest"
import { Actor, ActorContext, ActorSystem, Rpc, RpcGroup, Supervisor } from "@reins/runtime"
import { Cause, Duration, Effect, Fiber, Logger, Option, Ref, Schedule, ScheduleIntervals, Schema, type Scope } from "effect"
import { testHandlers } from "./fixtures/handlers.js"
import { TestActor } from "./fixtures/protocol.js"

const run = <A, E>(effect: Effect.Effect<A, E, ActorSystem | Scope.Scope>) =>
  Effect.runPromise(effect.pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal())) as Effect.Effect<A, E>)

/** Steps a policy at the given crash times; returns each delay in ms, or "escalate". */
const decisions = (policy: Supervisor.RestartPolicy, times: ReadonlyArray<number>) =>
  Effect.runSync(Effect.gen(function*() {
    let state: unknown = policy.initial
    const out: Array<number | "escalate"> = []
    for (const now of times) {
      const [next, , decision] = yield* policy.step(now, Cause.empty, state)
      state = next
      out.push(decision._tag === "Done" ? "escalate" : ScheduleIntervals.start(decision.intervals) - now)
    }
    return out
  }))

/** Retries until `f` holds (bounded): for state that changes asynchronously. */
const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>, f: (a: A) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(f, () => "not yet" as const),
    Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds")))
  )

describe("restart policy", () => {
  it("backs off exponentially up to the cap, then escalates after N restarts in the window", () => {
    const policy = Supervisor.policy({ initialDelay: "10 millis", factor: 2, maxDelay: "40 millis", maxRestarts: 4, within: "1 minute" })
    expect(decisions(policy, [0, 100, 200, 300, 400])).toEqual([10, 20, 40, 40, "escalate"])
  })

  it("counts restarts in a sliding window and starts the backoff over after a quiet period", () => {
    const policy = Supervisor.policy({ initialDelay: "10 millis", maxRestarts: 2, within: "1 second" })
    // two crashes, then one 1.5 s later: the window slid and the backoff restarted
    expect(decisions(policy, [0, 100, 1600])).toEqual([10, 20, 10])
    expect(decisions(policy, [0, 100, 200])).toEqual([10, 20, "escalate"])
  })
})

describe("supervision", () => {
  it("restarts a failing start with backoff", () =>
    run(Effect.gen(function*() {
      const attempts = yield* Ref.make<ReadonlyArray<number>>([])
      const build = Effect.gen(function*() {
        const now = Date.now()
        const previous = yield* Ref.getAndUpdate(attempts, (a) => [...a, now])
        if (previous.length < 2) return yield* Effect.fail(`start #${previous.length} failed`)
        return yield* testHandlers("main")
      })
      yield* TestActor.spawn(build, { restart: Supervisor.policy({ initialDelay: "50 millis", factor: 2 }) })
      const test = yield* TestActor.client
      expect(yield* test.Incarnation()).toBe(2)
      const times = yield* Ref.get(attempts)
      expect(times.length).toBe(3)
      expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(45)
      expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(95)
    })))

  it("turns a handler defect into ActorDefect, restarts the actor, and leaves its siblings alone", () =>
    run(Effect.gen(function*() {
      const fast = Supervisor.policy({ initialDelay: "10 millis" })
      yield* TestActor.spawn(testHandlers("main"), { restart: fast })
      yield* TestActor.spawn(testHandlers("main"), { name: "sibling", restart: fast })
      const test = yield* TestActor.client
      const sibling = yield* TestActor.ref("sibling")
      const siblingCall = yield* Effect.fork(sibling.Sleep({ ms: 300 }))
      const inFlight = yield* Effect.fork(test.Sleep({ ms: 5_000 }))
      yield* Effect.sleep("50 millis")

      const defect = yield* Effect.flip(test.Die({ reason: "boom" }))
      expect(defect).toMatchObject({ _tag: "ActorDefect", actor: "test" })
      expect(defect._tag === "ActorDefect" && defect.defect).toContain("boom")
      // the crashed actor's other call in flight ends with a tagged error, not a hang
      const cut = yield* Effect.flip(Fiber.join(inFlight))
      expect(cut).toMatchObject({ _tag: "ActorUnavailable", reason: "restarting" })
      // it comes back as a new incarnation
      expect(yield* eventually(Effect.either(test.Incarnation()), (e) => e._tag === "Right" && e.right === 1)).toBeTruthy()
      // the sibling never noticed
      expect(yield* Fiber.join(siblingCall)).toBe("slept")
      expect(yield* sibling.Incarnation()).toBe(0)
    })))

  it("crashes (and restarts) an actor whose forked background fiber fails", () =>
    run(Effect.gen(function*() {
      const Group = RpcGroup.make(Rpc.make("Incarnation", { success: Schema.Number }))
      const Looper = Actor.make("looper", Group)
      yield* Looper.spawn(
        Effect.gen(function*() {
          const context = yield* ActorContext
          if (context.incarnation === 0) yield* context.fork(Effect.delay(Effect.fail("loop broke"), "20 millis"))
          return { Incarnation: () => Effect.succeed(context.incarnation) }
        }),
        { restart: Supervisor.policy({ initialDelay: "10 millis" }) }
      )
      const looper = yield* Looper.client
      yield* eventually(Effect.either(looper.Incarnation()), (e) => e._tag === "Right" && e.right === 1)
    })))

  it("escalates after too many restarts: the node logs it and stops the actor and its children", () =>
    Effect.gen(function*() {
      const logs = yield* Ref.make<ReadonlyArray<string>>([])
      const logger = Logger.make(({ logLevel, message }) => {
        Effect.runSync(Ref.update(logs, (l) => [...l, `${logLevel.label} ${String(message)}`]))
      })
      yield* Effect.gen(function*() {
        const Child = Actor.make("child", RpcGroup.make(Rpc.make("Ping", { success: Schema.String })))
        const parentBuild = Effect.gen(function*() {
          yield* Child.spawn({ Ping: () => Effect.succeed("child pong") })
          return yield* testHandlers("main")
        })
        yield* TestActor.spawn(parentBuild, {
          restart: Supervisor.policy({ initialDelay: "10 millis", maxRestarts: 2, within: "1 minute" })
        })
        const test = yield* TestActor.client
        const child = yield* Child.client
        expect(yield* child.Ping()).toBe("child pong")

        for (let crash = 0; crash < 3; crash++) {
          yield* eventually(Effect.either(test.Incarnation()), (e) => e._tag === "Right" && e.right === crash)
          expect(yield* Effect.flip(test.Die({ reason: `crash ${crash}` }))).toMatchObject({ _tag: "ActorDefect" })
        }
        const stopped = yield* eventually(Effect.flip(test.Ping()), (e) => e._tag === "ActorUnavailable")
        expect(stopped).toMatchObject({ _tag: "ActorUnavailable", reason: "stopped" })
        // the child went with its parent
        expect(yield* Effect.flip(child.Ping())).toMatchObject({ _tag: "ActorNotFound" })
        const system = yield* ActorSystem
        expect(system.localActors()).toEqual([{ name: "test", status: "stopped", restarts: 2, system: false }])
        expect((yield* Ref.get(logs)).some((l) => l.startsWith("ERROR") && l.includes("escalating"))).toBe(true)
      }).pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal()), Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
    }).pipe(Effect.runPromise))

  it("fails calls to a stopped actor fast instead of hanging", () =>
    run(Effect.gen(function*() {
      yield* TestActor.spawn(Effect.fail("never starts"), { restart: Supervisor.never })
      const test = yield* TestActor.client
      const error = yield* Effect.flip(test.Ping()).pipe(Effect.timeout(Duration.seconds(2)))
      expect(error).toMatchObject({ _tag: "ActorUnavailable", reason: "stopped" })
      expect(Option.isNone(yield* Effect.serviceOption(ActorContext))).toBe(true)
    })))
})
