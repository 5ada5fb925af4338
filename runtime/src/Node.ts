/**
 * A node: one process of the cluster. It listens on one port, joins the cluster, runs the actors
 * it is given (the CLI picks them by role), and answers `reins status` through its system actor
 * `reins.node`. Shutting down (scope close, e.g. SIGINT/SIGTERM in the CLI) first tells the peers
 * it leaves, then stops its actors (calls in flight get `ActorUnavailable("shutting-down")`), then
 * closes its connections and its port.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Context, Duration, Effect, ExecutionStrategy, Layer, type Redacted, Scope } from "effect"
import os from "node:os"
import path from "node:path"
import * as Actor from "./Actor.js"
import { ActorSystem, make as makeSystem } from "./ActorSystem.js"
import * as DataDir from "./DataDir.js"
import { NodeStartError } from "./errors.js"
import { ClusterStatus } from "./cluster/Member.js"
import * as Membership from "./cluster/Membership.js"
import * as Secret from "./cluster/Secret.js"
import * as Supervisor from "./Supervisor.js"
import * as Transport from "./cluster/Transport.js"
import { DEFAULT_MAX_FRAME_BYTES } from "./cluster/Wire.js"

export interface NodeConfig {
  /** Interface to listen on (default 127.0.0.1). */
  readonly host?: string
  /** Port to listen on; 0 picks a free one (default 0). */
  readonly port?: number
  /** Addresses of members to join through (`ws://host:port`); any one member is enough. */
  readonly join?: ReadonlyArray<string>
  /** Recorded in membership (the CLI starts actors by role). */
  readonly roles?: ReadonlyArray<string>
  /** Holds the node id, the lock and (if generated) the cluster secret. */
  readonly dataDir: string
  /** Read the cluster secret from this file (see Secret.ts for the defaults). */
  readonly secretFile?: string
  /** Or give it directly (tests, embedding). */
  readonly secret?: Redacted.Redacted<string>
  /** Overrides the id stored in the data directory. */
  readonly id?: string
  /** The URL other nodes use to reach this one (default ws://<host>:<port>). */
  readonly advertise?: string
  /** A member silent for this long is marked down (default 4 s: down within 5 s). */
  readonly downAfter?: Duration.DurationInput
  /** Largest frame accepted (default 64 MiB); larger ones close the connection. */
  readonly maxFrameBytes?: number
}

export interface NodeInfo {
  readonly id: string
  /** The URL other nodes and `reins status` reach it at. */
  readonly address: string
  readonly roles: ReadonlyArray<string>
  readonly dataDir: string
  readonly secret: { readonly source: Secret.ClusterSecret["source"]; readonly path?: string }
}

/** The node this code runs on. */
export class CurrentNode extends Context.Tag("@reins/runtime/CurrentNode")<CurrentNode, NodeInfo>() {}

/** The node's own actor: `Status` returns the cluster as this node sees it. */
export const NodeActor = Actor.make("reins.node", RpcGroup.make(Rpc.make("Status", { success: ClusterStatus })))

export const DEFAULT_DOWN_AFTER = Duration.seconds(4)

/**
 * The failure detector's timing for a `downAfter`: heartbeats every `heartbeatMs` (≤ 1 s), looks
 * every `checkMs`. A member that stops is marked down at most `worstMs` after its last sign of
 * life (the silence, then at most one look), by the marking node's clock.
 */
export const detectorTiming = (downAfter: Duration.DurationInput = DEFAULT_DOWN_AFTER) => {
  const downAfterMs = Duration.toMillis(Duration.decode(downAfter))
  const heartbeatMs = Membership.heartbeatEveryMs(downAfterMs)
  const checkMs = Membership.checkEveryMs(heartbeatMs)
  return { downAfterMs, heartbeatMs, checkMs, worstMs: downAfterMs + checkMs }
}

const advertised = (host: string, port: number) => {
  const reachable = host === "0.0.0.0" || host === "::" ? os.hostname() : host
  return `ws://${reachable.includes(":") ? `[${reachable}]` : reachable}:${port}`
}

const validate = (config: NodeConfig) => {
  for (const url of config.join ?? []) {
    try {
      Transport.endpoint(url)
    } catch (error) {
      return Effect.fail(new NodeStartError({ detail: `--join ${url}: ${(error as Error).message}` }))
    }
  }
  const down = Duration.decode(config.downAfter ?? DEFAULT_DOWN_AFTER)
  if (Duration.toMillis(down) < 200) return Effect.fail(new NodeStartError({ detail: "--down-after must be at least 200 ms" }))
  return Effect.succeed(down)
}

/**
 * Runs a node with `actors` for the lifetime of the layer, and provides its `ActorSystem` (to call
 * any actor of the cluster) and `CurrentNode`.
 */
export const layer = <E, R>(
  config: NodeConfig,
  actors: Layer.Layer<never, E, R>
): Layer.Layer<ActorSystem | CurrentNode, NodeStartError | E, Exclude<R, ActorSystem | CurrentNode>> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const downAfter = yield* validate(config)
      const dataDir = path.resolve(config.dataDir)
      yield* DataDir.lock(dataDir)
      const id = yield* DataDir.nodeId(dataDir, config.id)
      const secret: Secret.ClusterSecret = config.secret
        ? { secret: config.secret, source: "config" }
        : yield* Secret.load({ secretFile: config.secretFile, dataDir, generate: true })
      const host = config.host ?? "127.0.0.1"
      const roles = [...(config.roles ?? [])]
      const maxFrameBytes = config.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
      const incarnation = Date.now()

      const system = yield* makeSystem({ node: id })
      const membership = yield* Membership.make({
        self: { id, incarnation, kind: "node", address: "", roles, maxFrameBytes },
        secret: secret.secret,
        join: config.join ?? [],
        downAfter,
        system
      })
      const bound = yield* Transport.listen({
        host,
        port: config.port ?? 0,
        secret: secret.secret,
        self: membership.self,
        maxFrameBytes,
        onConnection: membership.onConnection,
        health: () => ({ id, status: "up", roles }),
        logs: membership.log
      })
      yield* Effect.addFinalizer(() => membership.closeAll)
      const address = config.advertise ?? advertised(host, bound.port)
      yield* membership.start(address)

      const info: NodeInfo = {
        id,
        address,
        roles,
        dataDir,
        secret: secret.path === undefined ? { source: secret.source } : { source: secret.source, path: secret.path }
      }
      const context = Context.make(ActorSystem, system as ActorSystem["Type"]).pipe(Context.add(CurrentNode, info))

      // the node's own actor, then the user's actors, in a scope that closes first on shutdown
      const scope = yield* Effect.scope
      const actorsScope = yield* Scope.fork(scope, ExecutionStrategy.sequential)
      yield* system.spawn({
        name: NodeActor.name,
        group: NodeActor.protocol as unknown as RpcGroup.RpcGroup<Rpc.Any>,
        build: Effect.succeed(NodeActor.of({
          Status: () =>
            Effect.map(membership.locator.members, (members) => ({
              nodes: members.map(({ version: _version, ...node }) => node)
            }))
        })),
        restartPolicy: Supervisor.defaultPolicy,
        concurrency: "unbounded",
        system: true
      }).pipe(Scope.extend(actorsScope), Effect.orDie)
      const userContext = yield* Layer.buildWithScope(actors, actorsScope).pipe(Effect.provide(context))
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          yield* membership.leave
          system.beginShutdown()
          yield* Effect.logInfo(`node ${id} leaving the cluster`)
        })
      )
      yield* Effect.logInfo(
        `node ${id} listening on ${address} (roles: ${roles.join(",") || "none"}; actors: ${
          system.localActors().filter((a) => !a.system).map((a) => a.name).join(", ") || "none"
        })`
      )
      return Context.merge(context, userContext as Context.Context<never>)
    })
  )

/** Describes the secret for the operator: where it came from and how other nodes get it. */
export const secretHint = (info: NodeInfo): string => {
  switch (info.secret.source) {
    case "generated":
      return `generated a cluster secret in ${info.secret.path}; start other nodes with --secret-file ${info.secret.path} (or ${Secret.ENV}=<its content>)`
    case "data-dir":
      return `cluster secret: ${info.secret.path} (other nodes: --secret-file ${info.secret.path})`
    case "file":
      return `cluster secret: ${info.secret.path}`
    case "env":
      return `cluster secret: from ${Secret.ENV}`
    case "config":
      return "cluster secret: given by the program that started the node"
  }
}
