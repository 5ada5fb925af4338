/**
 * The tagged errors an actor call can fail with, on top of the errors its own protocol declares.
 * They are `Schema.TaggedError`s so they cross the wire intact: a caller sees the same value
 * whether the actor ran in its own thread, in a worker thread or on another node.
 */
import { Schema } from "effect"

/** No actor of that name is registered anywhere in the cluster (or on the node a ref is pinned to). */
export class ActorNotFound extends Schema.TaggedError<ActorNotFound>()("ActorNotFound", {
  actor: Schema.String,
  node: Schema.optional(Schema.String)
}) {
  override get message() {
    return `no actor named "${this.actor}"${this.node ? ` on node ${this.node}` : " in the cluster"}`
  }
}

/**
 * Why an actor could not take or finish a call. Every reason is transient from the caller's
 * point of view except `stopped` (the supervisor gave up and the node stopped the actor).
 */
export const UnavailableReason = Schema.Literal(
  /** The actor's first start has not finished yet. */
  "starting",
  /** The actor crashed and waits for its restart (calls in flight when it crashed end here too). */
  "restarting",
  /** The supervisor escalated and the node stopped the actor (and its children). */
  "stopped",
  /** The node that runs the actor is shutting down. */
  "shutting-down",
  /** The node that runs the actor is marked down by membership. */
  "node-down",
  /** The connection to the actor's node broke (or could not be opened) while the call was pending. */
  "disconnected"
)
export type UnavailableReason = typeof UnavailableReason.Type

/** The actor exists but cannot answer now; see `reason`. Nothing waits for it: calls fail fast. */
export class ActorUnavailable extends Schema.TaggedError<ActorUnavailable>()("ActorUnavailable", {
  actor: Schema.String,
  reason: UnavailableReason,
  node: Schema.optional(Schema.String)
}) {
  override get message() {
    return `actor "${this.actor}"${this.node ? ` on node ${this.node}` : ""} is unavailable (${this.reason})`
  }
}

/**
 * The handler died (a defect, not a declared error) while serving this call. The actor is
 * restarted by its supervisor; the caller gets this value instead of the defect so that one
 * crashing actor never crashes its callers.
 */
export class ActorDefect extends Schema.TaggedError<ActorDefect>()("ActorDefect", {
  actor: Schema.String,
  defect: Schema.String
}) {
  override get message() {
    return `actor "${this.actor}" died while handling the call: ${this.defect}`
  }
}

/** The actor does not know this message (typically two nodes running different versions). */
export class UnknownMessage extends Schema.TaggedError<UnknownMessage>()("UnknownMessage", {
  actor: Schema.String,
  tag: Schema.String
}) {
  override get message() {
    return `actor "${this.actor}" has no message "${this.tag}"`
  }
}

/** The message (or its reply) does not match the protocol's schema, or is too large to send. */
export class InvalidMessage extends Schema.TaggedError<InvalidMessage>()("InvalidMessage", {
  actor: Schema.String,
  tag: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `invalid "${this.tag}" message for actor "${this.actor}": ${this.detail}`
  }
}

/** Every error the runtime adds to an actor call. */
export const ActorError = Schema.Union(ActorNotFound, ActorUnavailable, ActorDefect, UnknownMessage, InvalidMessage)
export type ActorError = typeof ActorError.Type

export const isActorError = (u: unknown): u is ActorError =>
  u instanceof ActorNotFound || u instanceof ActorUnavailable || u instanceof ActorDefect ||
  u instanceof UnknownMessage || u instanceof InvalidMessage

/** An actor with this name is already registered on this node. */
export class ActorAlreadyRunning extends Schema.TaggedError<ActorAlreadyRunning>()("ActorAlreadyRunning", {
  actor: Schema.String,
  node: Schema.String
}) {
  override get message() {
    return `an actor named "${this.actor}" already runs on node ${this.node}`
  }
}

/** A node could not start: bad flags, port in use, unreadable secret, data dir in use... */
export class NodeStartError extends Schema.TaggedError<NodeStartError>()("NodeStartError", {
  detail: Schema.String
}) {
  override get message() {
    return this.detail
  }
}

/** Joining a cluster (or connecting as a client) failed: refused, wrong secret, unreachable. */
export class ClusterConnectError extends Schema.TaggedError<ClusterConnectError>()("ClusterConnectError", {
  url: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `cannot connect to ${this.url}: ${this.detail}`
  }
}
