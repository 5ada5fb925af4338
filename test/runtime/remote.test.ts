/**
 * Two nodes in this process, talking over real loopback websockets: cross-node calls, streams,
 * packed arrays, the runtime's tagged errors, and a node that leaves.
 */
import { describe, expect, it } from "@effect/vitest"
import { Actor, ActorSystem, Cluster, Node, Rpc } from "@reins/runtime"
import { Chunk, Context, Effect, Exit, Layer, Redacted, Schedule, Schema, Scope, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { testHandlers } from "./fixtures/handlers.js"
import { freePort } from "./fixtures/processes.js"
import { TestActor, TestProtocol } from "./fixtures/protocol.js"

const secret = Redacted.make("remote-test-secret-0123456789")

const startNode = (dir: string, name: string, actors: Layer.Layer<never, unknown, ActorSystem>, join?: string, port?: number) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Node.layer({ dataDir: path.join(dir, name), secret, join: join ? [join] : [], downAfter: "2 seconds", host: "127.0.0.1", port: port ?? 0 }, actors),
      scope
    )
    return { system: Context.get(context, ActorSystem), node: Context.get(context, Node.CurrentNode), stop: Scope.close(scope, Exit.void) }
  })

const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>, f: (a: A) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(f, () => "not yet" as const),
    Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("15 seconds")))
  )

describe("cross-node calls", () => {
  it("carry requests, streams, packed arrays and tagged errors between nodes; a leaving node is down at once", () =>
    Effect.gen(function*() {
      const dir = mkdtempSync(path.join(os.tmpdir(), "reins-remote-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const a = yield* startNode(dir, "a", TestActor.toLayer(testHandlers("a")))
      const b = yield* startNode(dir, "b", Layer.empty, a.node.address)
      yield* Effect.addFinalizer(() => Effect.zipRight(b.stop, a.stop))

      // b learns that `test` runs on a
      yield* eventually(b.system.members, (ms) => ms.some((m) => m.id === a.node.id && m.actors.includes("test")))
      const test = yield* Effect.provideService(TestActor.client, ActorSystem, b.system)
      expect(yield* test.Where()).toBe("a")

      const ids = Int32Array.from({ length: 2048 }, (_, i) => (i * 2654435761) | 0)
      const logprobs = Float32Array.from({ length: 2048 }, (_, i) => -Math.log1p(i))
      const echoed = yield* test.Echo({ ids, logprobs })
      expect(echoed.ids).not.toBe(ids)
      expect(echoed.ids).toBeInstanceOf(Int32Array)
      expect(Array.from(echoed.ids)).toEqual(Array.from(ids))
      expect(Array.from(echoed.logprobs)).toEqual(Array.from(logprobs))
      expect(echoed.sum).toBe(ids.reduce((x, y) => x + y, 0))

      const counted = yield* Stream.runCollect(test.Count({ n: 100 }))
      expect(Chunk.toReadonlyArray(counted)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1))
      expect(yield* Effect.flip(test.Fail({ reason: "typed" }))).toMatchObject({ _tag: "Oops", reason: "typed" })
      expect(yield* Effect.flip(test.Die({ reason: "remote boom" }))).toMatchObject({ _tag: "ActorDefect", actor: "test" })

      // unknown actor: known to nobody, or pinned to a node that does not run it
      const ghost = yield* Effect.provideService(Actor.make("ghost", TestProtocol).client, ActorSystem, b.system)
      expect(yield* Effect.flip(ghost.Ping())).toMatchObject({ _tag: "ActorNotFound", actor: "ghost" })
      const pinned = yield* Effect.provideService(Actor.make("ghost", TestProtocol).ref("ghost", { node: a.node.id }), ActorSystem, b.system)
      expect(yield* Effect.flip(pinned.Ping())).toMatchObject({ _tag: "ActorNotFound", actor: "ghost", node: a.node.id })
      // unknown message: the caller's protocol is newer than the actor's
      const newer = yield* Effect.provideService(
        Actor.make("test", TestProtocol.add(Rpc.make("Newer", { success: Schema.String }))).client,
        ActorSystem,
        b.system
      )
      yield* eventually(Effect.either(newer.Ping()), (e) => e._tag === "Right")
      expect(yield* Effect.flip(newer.Newer())).toMatchObject({ _tag: "UnknownMessage", actor: "test", tag: "Newer" })

      // a client outside the cluster reaches the same actor
      yield* Effect.gen(function*() {
        const client = yield* Cluster.connect({ join: b.node.address, secret })
        expect(client.entry.id).toBe(b.node.id)
        const viaClient = yield* Effect.provideService(TestActor.client, ActorSystem, client.system)
        expect(yield* eventually(Effect.either(viaClient.Where()), (e) => e._tag === "Right")).toMatchObject({ right: "a" })
      }).pipe(Effect.scoped)

      // a stops: it says goodbye, b marks it down at once and calls fail fast
      const downs = yield* b.system.events.pipe(
        Stream.filter((e) => e._tag === "MemberDown"),
        Stream.take(1),
        Stream.runCollect,
        Effect.fork
      )
      yield* Effect.sleep("100 millis")
      yield* a.stop
      const down = Chunk.toReadonlyArray(yield* downs.await.pipe(Effect.flatten, Effect.timeout("5 seconds")))
      expect(down[0]).toMatchObject({ _tag: "MemberDown", reason: "left", member: { id: a.node.id } })
      const gone = yield* Effect.flip(test.Ping()).pipe(Effect.timeout("2 seconds"))
      expect(gone).toMatchObject({ _tag: "ActorUnavailable", actor: "test", reason: "node-down" })
    }).pipe(Effect.scoped, Effect.runPromise), 60_000)

  it("a node whose seed starts late still joins it, though another node joined it meanwhile", () =>
    Effect.gen(function*() {
      const dir = mkdtempSync(path.join(os.tmpdir(), "reins-remote-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const seedPort = yield* Effect.promise(freePort)
      // b's seed is not up yet: its first dial is refused
      const b = yield* startNode(dir, "b", Layer.empty, `ws://127.0.0.1:${seedPort}`)
      yield* Effect.addFinalizer(() => b.stop)
      // c joins b, so b is no longer alone when its seed comes up
      const c = yield* startNode(dir, "c", Layer.empty, b.node.address)
      yield* Effect.addFinalizer(() => c.stop)
      yield* eventually(b.system.members, (ms) => ms.some((m) => m.id === c.node.id && m.status === "up"))
      const seed = yield* startNode(dir, "seed", TestActor.toLayer(testHandlers("seed")), undefined, seedPort)
      yield* Effect.addFinalizer(() => seed.stop)
      // one cluster of three: c reaches the seed's actor through what b learned from it
      for (const node of [b, c, seed]) yield* eventually(node.system.members, (ms) => ms.filter((m) => m.status === "up").length === 3)
      const test = yield* Effect.provideService(TestActor.client, ActorSystem, c.system)
      expect(yield* eventually(Effect.either(test.Where()), (e) => e._tag === "Right")).toMatchObject({ right: "seed" })
    }).pipe(Effect.scoped, Effect.runPromise), 60_000)

  it("refuses a node with the wrong secret", () =>
    Effect.gen(function*() {
      const dir = mkdtempSync(path.join(os.tmpdir(), "reins-remote-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const a = yield* startNode(dir, "a", Layer.empty)
      yield* Effect.addFinalizer(() => a.stop)
      const refused = yield* Effect.flip(
        Cluster.connect({ join: a.node.address, secret: Redacted.make("not-the-cluster-secret!") }).pipe(Effect.scoped)
      )
      expect(refused).toMatchObject({ _tag: "ClusterConnectError" })
      expect(refused.message).toContain("wrong cluster secret")
    }).pipe(Effect.scoped, Effect.runPromise), 30_000)
})
