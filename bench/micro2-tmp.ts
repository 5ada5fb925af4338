import { Actor, ActorSystem, Packed, Rpc, RpcGroup } from "@reins/runtime"
import { RpcTest } from "@effect/rpc"
import { Context, Effect, Layer, Schema } from "effect"
const G = RpcGroup.make(Rpc.make("Echo", { payload: { ids: Packed.Int32 }, success: Schema.Struct({ ids: Packed.Int32 }) }))
const EchoActor = Actor.make("echo", G)
const N = 100000
const ids = Int32Array.from({ length: 8 }, (_, i) => i)
const measure = (name: string, call: Effect.Effect<unknown, unknown>) => Effect.gen(function*() {
  let left = N
  const loop = Effect.whileLoop({ while: () => left-- > 0, body: () => call, step: () => {} })
  yield* Effect.forEach(Array.from({ length: 64 }), () => loop, { concurrency: "unbounded", discard: true }) // warm
  left = N
  const c0 = process.cpuUsage(); const t0 = performance.now()
  yield* Effect.forEach(Array.from({ length: 64 }), () => loop, { concurrency: "unbounded", discard: true })
  const c = process.cpuUsage(c0)
  console.log(name, "cpu µs/call", ((c.user + c.system) / N).toFixed(2), "wall µs/call", ((performance.now() - t0) * 1000 / N).toFixed(2))
})
await Effect.runPromise(Effect.gen(function*() {
  // plain Effect RpcTest client (no serialization)
  const client = yield* RpcTest.makeClient(G).pipe(Effect.provide(G.toLayer({ Echo: ({ ids }) => Effect.succeed({ ids }) })))
  yield* measure("RpcTest", client.Echo({ ids }))
  const ctx = yield* Layer.build(Layer.provideMerge(EchoActor.toLayer({ Echo: ({ ids }) => Effect.succeed({ ids }) }), ActorSystem.layerLocal()))
  const echo = yield* Effect.provideService(EchoActor.client, ActorSystem, Context.get(ctx, ActorSystem))
  yield* measure("reins local", echo.Echo({ ids }))
  yield* measure("Effect.succeed", Effect.succeed(1))
}).pipe(Effect.scoped))
