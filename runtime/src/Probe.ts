/**
 * A placeholder actor for roles that are not built yet, and a probe to check a cluster's wiring:
 * it answers a ping, echoes packed token ids, streams a count, and pings another probe from its
 * own node (so a test or an operator can see what that node sees).
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Effect, Schema, Stream } from "effect"
import * as Actor from "./Actor.js"
import { ActorContext } from "./ActorContext.js"
import { ActorError } from "./errors.js"
import * as Packed from "./Packed.js"

export const Pong = Schema.Struct({
  actor: Schema.String,
  node: Schema.String,
  incarnation: Schema.Number
})

export const ProbeProtocol = RpcGroup.make(
  Rpc.make("Ping", { success: Pong }),
  Rpc.make("Echo", {
    payload: { ids: Packed.Int32 },
    success: Schema.Struct({ ids: Packed.Int32, sum: Schema.Number })
  }),
  Rpc.make("Count", { payload: { n: Schema.Int.pipe(Schema.between(0, 100_000)) }, success: Schema.Number, stream: true }),
  /** Pings the probe registered as `actor` (on `node`, if given) from this probe's node. */
  Rpc.make("Relay", {
    payload: { actor: Schema.String, node: Schema.optional(Schema.String) },
    success: Schema.Either({ right: Pong, left: ActorError })
  })
)

/** The probe protocol under some name (`gateway`, `trainer`...). */
export const actor = <const Name extends string>(name: Name) => Actor.make(name, ProbeProtocol)

const handlers = Effect.gen(function*() {
  const self = yield* ActorContext
  return ProbeProtocol.of({
    Ping: () => Effect.succeed({ actor: self.name, node: self.node, incarnation: self.incarnation }),
    Echo: ({ ids }) => Effect.succeed({ ids, sum: ids.reduce((a, b) => a + b, 0) }),
    Count: ({ n }) => (n === 0 ? Stream.empty : Stream.range(1, n, 64)),
    Relay: ({ actor: target, node }) =>
      Effect.flatMap(Actor.make(target, ProbeProtocol).ref(target, { node }), (ref) => Effect.either(ref.Ping()))
  })
})

/** Runs a probe under `name`. */
export const layer = (name: string) => actor(name).toLayer(handlers)
