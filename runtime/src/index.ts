/**
 * @reins/runtime: the actor kernel. Actors are named `RpcGroup` protocols, supervised with a
 * restart `Schedule`, reachable from anywhere in the cluster through a location-transparent
 * `ActorRef`; nodes exchange msgpack over one authenticated websocket per peer. See README.md.
 */

/** Define actors: `Actor.make(name, protocol)`, `.toLayer(handlers)`, `.client`. */
export * as Actor from "./Actor.js"
/** What an actor knows about itself while it runs (name, node, incarnation, `fork`). */
export { ActorContext, type ActorContextService } from "./ActorContext.js"
/** The actors of this process and the way to reach any actor of the cluster. */
export { type ActorRef, ActorSystem, type ActorSystemService, type LocalActor } from "./ActorSystem.js"
/** Connect to a cluster from outside it (tools, scripts). */
export * as Cluster from "./cluster/Cluster.js"
/** The runtime's tagged errors. */
export * from "./errors.js"
/** Members and membership events. */
export { ClusterStatus, type DownReason, Member, type MemberEvent, MemberInfo, type MemberState } from "./cluster/Member.js"
/** Run a node: `Node.layer(config, actors)`. */
export * as Node from "./Node.js"
/** Typed arrays that travel as packed bytes. */
export * as Packed from "./Packed.js"
/** A placeholder / probe actor (ping, echo, stream, relay). */
export * as Probe from "./Probe.js"
/** Where the cluster secret comes from (`--secret-file`, `REINS_CLUSTER_SECRET`, the data dir). */
export * as Secret from "./cluster/Secret.js"
/** Restart policies. */
export * as Supervisor from "./Supervisor.js"
/** Actors in worker threads: `Worker.serve` in the worker's entry. */
export * as Worker from "./Worker.js"
/** The protocol building blocks, re-exported so actor packages need only @reins/runtime. */
export { Rpc, RpcGroup, RpcSchema } from "@effect/rpc"
