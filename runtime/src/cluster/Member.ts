/**
 * Cluster members as a node sees them, and the events watchers receive. Schemas, because they
 * travel (gossip, `reins status`).
 */
import { Schema, Struct } from "effect"

/** A member as its owner describes itself; `version` grows with every heartbeat and change. */
export const MemberInfo = Schema.Struct({
  id: Schema.String,
  /** The websocket URL other nodes reach it at. */
  address: Schema.String,
  roles: Schema.Array(Schema.String),
  /** The actors it runs (system actors excluded). */
  actors: Schema.Array(Schema.String),
  /** Start time of the process (ms): larger means restarted. */
  incarnation: Schema.Number,
  version: Schema.Number
})
export type MemberInfo = typeof MemberInfo.Type

export const MemberState = Schema.Literal("up", "down")
export type MemberState = typeof MemberState.Type

/** A member plus this node's judgement of it. */
export const Member = Schema.Struct({
  ...MemberInfo.fields,
  status: MemberState,
  /** When `status` last changed, as this node saw it (ms since epoch). */
  since: Schema.Number,
  /**
   * When this node last had news of it (a newer heartbeat, directly or by gossip; ms since
   * epoch): now for the node itself. Local judgement, so gossip does not carry it.
   */
  lastHeartbeat: Schema.optional(Schema.Number)
})
export type Member = typeof Member.Type

export const DownReason = Schema.Literal("timeout", "left")
export type DownReason = typeof DownReason.Type

/** What watchers of the cluster are told. */
export type MemberEvent =
  | { readonly _tag: "MemberUp"; readonly member: Member }
  | { readonly _tag: "MemberDown"; readonly member: Member; readonly reason: DownReason }

/** `{"nodes":[...]}`: what `reins status` prints with `--json`. */
export const ClusterStatus = Schema.Struct({
  nodes: Schema.Array(
    // a member without its `version`, its fields in the order they are printed
    Schema.Struct(Struct.pick(Member.fields, "id", "address", "roles", "status", "actors", "since", "lastHeartbeat", "incarnation"))
  )
})
export type ClusterStatus = typeof ClusterStatus.Type
