/** Actors in one process: request/response, streams, errors, no serialization on local calls. */
import { describe, expect, it } from "@effect/vitest"
import { Actor, ActorSystem, Rpc, RpcGroup } from "@reins/runtime"
import { Chunk, Effect, Exit, Schema, Stream } from "effect"
import { testHandlers } from "./fixtures/handlers.js"
import { TestActor, TestProtocol } from "./fixtures/protocol.js"

const run = <A, E>(effect: Effect.Effect<A, E, ActorSystem | import("effect").Scope.Scope>) =>
  Effect.runPromise(effect.pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal())) as Effect.Effect<A, E>)

describe("local actors", () => {
  it("answers request/response and streams", () =>
    run(Effect.gen(function*() {
      yield* TestActor.spawn(testHandlers("main"))
      const test = yield* TestActor.client
      expect(yield* test.Ping()).toBe("pong")
      const counted = yield* Stream.runCollect(test.Count({ n: 5 }))
      expect(Chunk.toReadonlyArray(counted)).toEqual([1, 2, 3, 4, 5])
      const failed = yield* Effect.flip(test.Fail({ reason: "nope" }))
      expect(failed._tag).toBe("Oops")
    })))

  it("delivers local calls without serializing (same typed array instance)", () =>
    run(Effect.gen(function*() {
      yield* TestActor.spawn(testHandlers("main"))
      const test = yield* TestActor.client
      const ids = Int32Array.from([1, 2, 3])
      const reply = yield* test.Echo({ ids, logprobs: new Float32Array(3) })
      expect(reply.ids).toBe(ids)
      expect(reply.sum).toBe(6)
    })))

  it("fails with tagged errors for unknown actors and messages", () =>
    run(Effect.gen(function*() {
      yield* TestActor.spawn(testHandlers("main"))
      const ghost = yield* Actor.make("ghost", TestProtocol).client
      const notFound = yield* Effect.flip(ghost.Ping())
      expect(notFound._tag).toBe("ActorNotFound")
      // a caller with a newer protocol than the actor: the extra message is unknown
      const Newer = Actor.make("test", TestProtocol.add(Rpc.make("Newer", { success: Schema.String })))
      const newer = yield* Newer.client
      const unknown = yield* Effect.flip(newer.Newer())
      expect(unknown).toMatchObject({ _tag: "UnknownMessage", actor: "test", tag: "Newer" })
      expect(yield* newer.Ping()).toBe("pong")
    })))

  it("refuses a second actor with the same name on one node", () =>
    run(Effect.gen(function*() {
      yield* TestActor.spawn(testHandlers("main"))
      const exit = yield* Effect.exit(TestActor.spawn(testHandlers("main")))
      expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("ActorAlreadyRunning")
    })))

  it("registers one instance per node with a name function", () =>
    run(Effect.gen(function*() {
      const Group = RpcGroup.make(Rpc.make("Who", { success: Schema.String }))
      const PerNode = Actor.make("rollout", Group)
      yield* PerNode.spawn({ Who: () => Effect.succeed("me") }, { name: (node) => `rollout/${node}` })
      const ref = yield* PerNode.ref("rollout/local")
      expect(yield* ref.Who()).toBe("me")
      const system = yield* ActorSystem
      expect(system.localActors().map((a) => a.name)).toEqual(["rollout/local"])
    })))
})
