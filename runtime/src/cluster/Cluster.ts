/**
 * Talking to a cluster from outside it: a tool (`reins status`), a script, a benchmark. A client
 * authenticates like a node, learns the members from the node it connects to, dials the ones it
 * needs, and calls actors through an ordinary `ActorSystem`, but is never a member and hosts no
 * actors.
 */
import { Effect, Layer, type Redacted, Schedule, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { ActorSystem, type ActorSystemService, make as makeSystem } from "../ActorSystem.js"
import { type ActorError, ClusterConnectError } from "../errors.js"
import type { PeerInfo } from "./Handshake.js"
import * as Membership from "./Membership.js"
import type { ClusterStatus } from "./Member.js"
import { DEFAULT_DOWN_AFTER, NodeActor } from "../Node.js"
import { DEFAULT_MAX_FRAME_BYTES } from "./Wire.js"

export interface ClientOptions {
  /** Any member's address, `ws://host:port`. */
  readonly join: string
  readonly secret: Redacted.Redacted<string>
  readonly maxFrameBytes?: number
}

export interface ClusterClient {
  /** Calls actors anywhere in the cluster (`Actor.ref(name, { node })`...). */
  readonly system: ActorSystemService
  /** The node the client connected to. */
  readonly entry: PeerInfo
}

/** Connects (fails with `ClusterConnectError`: unreachable, refused, wrong secret) until the scope closes. */
export const connect = (options: ClientOptions): Effect.Effect<ClusterClient, ClusterConnectError, Scope.Scope> =>
  Effect.gen(function*() {
    const id = `client-${randomBytes(4).toString("hex")}`
    const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
    const system = yield* makeSystem({ node: id })
    const membership = yield* Membership.make({
      self: { id, incarnation: Date.now(), kind: "client", address: "", roles: [], maxFrameBytes },
      secret: options.secret,
      join: [],
      downAfter: DEFAULT_DOWN_AFTER,
      system
    })
    yield* Effect.addFinalizer(() => membership.closeAll)
    const entry = yield* membership.connectTo(options.join)
    yield* membership.start("")
    // the entry node sends its member list right after the handshake
    yield* membership.locator.members.pipe(
      Effect.filterOrFail((members) => members.some((m) => m.id === entry.id && m.version >= 0)),
      Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo("5 seconds"))),
      Effect.mapError(() => new ClusterConnectError({ url: options.join, detail: "no member list from the node" }))
    )
    return { system, entry }
  })

/** `ActorSystem` of a client connected to the cluster. */
export const layer = (options: ClientOptions): Layer.Layer<ActorSystem, ClusterConnectError> =>
  Layer.scoped(ActorSystem, Effect.map(connect(options), (client) => client.system))

/** The cluster's members as the node at `join` sees them (what `reins status` prints). */
export const status = (options: ClientOptions): Effect.Effect<ClusterStatus, ClusterConnectError | ActorError> =>
  Effect.gen(function*() {
    const client = yield* connect(options)
    const ref = yield* NodeActor.ref(NodeActor.name, { node: client.entry.id }).pipe(
      Effect.provideService(ActorSystem, client.system)
    )
    return yield* ref.Status()
  }).pipe(Effect.scoped)
