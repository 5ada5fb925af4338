/** An actor placed in a worker thread: same calls, same errors, supervised. */
import { describe, expect, it } from "@effect/vitest"
import { ActorSystem, Supervisor } from "@reins/runtime"
import { Chunk, Effect, Layer, Schedule, type Scope, Stream } from "effect"
import { TestActor } from "./fixtures/protocol.js"

const entry = new URL("./fixtures/test.worker.ts", import.meta.url)

const run = <A, E>(effect: Effect.Effect<A, E, ActorSystem | Scope.Scope>) =>
  Effect.runPromise(effect.pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal())) as Effect.Effect<A, E>)

describe("worker placement", () => {
  it("serves request/response, streams, typed errors and packed arrays from a worker thread; restarts it after a defect", () =>
    run(Effect.gen(function*() {
      yield* Layer.build(TestActor.toWorkerLayer({ entry, restart: Supervisor.policy({ initialDelay: "10 millis" }) }))
      const test = yield* TestActor.client
      expect(yield* test.Where()).toBe("worker")
      expect(yield* test.Ping()).toBe("pong")

      const ids = Int32Array.from({ length: 2048 }, (_, i) => i * 7 - 3000)
      const logprobs = Float32Array.from({ length: 2048 }, (_, i) => -i / 100)
      const echoed = yield* test.Echo({ ids, logprobs })
      expect(echoed.ids).toBeInstanceOf(Int32Array)
      expect(Array.from(echoed.ids)).toEqual(Array.from(ids))
      expect(Array.from(echoed.logprobs)).toEqual(Array.from(logprobs))
      expect(echoed.sum).toBe(ids.reduce((a, b) => a + b, 0))

      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(test.Count({ n: 20 })))).toEqual(
        Array.from({ length: 20 }, (_, i) => i + 1)
      )
      expect(yield* Effect.flip(test.Fail({ reason: "typed" }))).toMatchObject({ _tag: "Oops", reason: "typed" })

      const defect = yield* Effect.flip(test.Die({ reason: "worker boom" }))
      expect(defect).toMatchObject({ _tag: "ActorDefect", actor: "test" })
      // a fresh worker takes over
      const system = yield* ActorSystem
      yield* Effect.sync(() => system.localActors()[0]!).pipe(
        Effect.filterOrFail((a) => a.restarts === 1 && a.status === "running", () => "not restarted yet"),
        Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("30 seconds")))
      )
      expect(yield* test.Where()).toBe("worker")
    })), 60_000)
})
