/**
 * `reins node --roles LIST --listen HOST:PORT [--join ws://HOST:PORT] [--data DIR] [--secret-file F]`:
 * runs one node of a reins cluster until SIGINT/SIGTERM, then shuts down gracefully (peers are
 * told, actors finalize). A node's roles decide which actors it starts (`roleActors`). What a
 * `rollout` node's shutdown does to its Kubernetes Jobs is `--rollout-on-stop` (or
 * `REINS_ROLLOUT_ON_STOP`): `delete` them, or `leave` them for the controller to hand to
 * another rollout node.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type { RolloutOnStop } from "@reins/rollout/controller"
import type { ActorSystem, Node, NodeStartError } from "@reins/runtime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"

// Loaded on use, so `reins --help` and the commands that need neither start fast.
const loadRuntime = Effect.promise(() => import("@reins/runtime"))
// The controller subpath keeps the Kubernetes client out of every node's start-up.
const loadController = Effect.promise(() => import("@reins/rollout/controller"))

/** Flags of `reins node` that configure a role's actors. */
export interface RoleOptions {
  readonly rolloutOnStop?: RolloutOnStop | undefined
}

export interface Role {
  readonly description: string
  /** The actors a node with this role runs. */
  readonly actors: (options: RoleOptions) => Layer.Layer<never, unknown, ActorSystem | Node.CurrentNode>
}

/**
 * Role → the actors it starts. The gateway and trainer roles belong to the process that owns the
 * device and drives a run: `reins train --join` is that node (it runs the `gateway`, `device` and
 * `trainer` actors). A bare `reins node` with those roles only answers pings under their names,
 * so a cluster's membership can be checked before a run starts.
 */
export const roleActors: Record<string, Role> = {
  gateway: {
    description: "answers Ping as `gateway` (the Gateway itself runs in `reins train --join` or `reins serve`)",
    actors: () => Layer.unwrapEffect(Effect.map(loadRuntime, ({ Probe }) => Probe.layer("gateway")))
  },
  trainer: {
    description: "answers Ping as `trainer` (the Trainer itself runs in `reins train --join`)",
    actors: () => Layer.unwrapEffect(Effect.map(loadRuntime, ({ Probe }) => Probe.layer("trainer")))
  },
  rollout: {
    description:
      "launcher actor `rollout/<node id>`: runs rollout attempts on this node (local processes; REINS_ROLLOUT_LAUNCHER=kubernetes for Jobs, " +
      "owned by this node's id, in REINS_ROLLOUT_NAMESPACES; REINS_ROLLOUT_CONCURRENCY=N, default 8)",
    actors: (options) =>
      Layer.unwrapEffect(Effect.gen(function*() {
        const { Node } = yield* loadRuntime
        const { launcherActorLayerFromEnv } = yield* loadController
        const node = yield* Node.CurrentNode
        return launcherActorLayerFromEnv({ dataDir: node.dataDir, nodeId: node.id, onStop: options.rolloutOnStop })
      }))
  }
}

export const DEFAULT_LISTEN = "127.0.0.1:7400"
export const DEFAULT_DATA = ".reins/node"

/** `reins node`'s options, its roles already parsed. */
export type NodeArgs = Omit<Command.Command.ParseConfig<typeof nodeOptions>, "roles"> & { readonly roles: ReadonlyArray<string> }

const fail = (detail: string) => Effect.flatMap(loadRuntime, ({ NodeStartError }) => Effect.fail(new NodeStartError({ detail })))

/** Prints a failure as one line and exits 1 (no stack trace for a bad flag or a busy port). */
export const failWith = (command: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchAll(effect, (error) =>
    Effect.zipRight(
      Console.error(`${command}: ${error instanceof Error ? error.message : String(error)}`),
      Effect.sync(() => void (process.exitCode = 1))
    ))

/** `HOST:PORT`, `:PORT` or `PORT`; IPv6 as `[::1]:PORT`. */
export const parseListen = (listen: string): Effect.Effect<{ host: string; port: number }, NodeStartError> => {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(listen) ?? /^()()(\d+)$/.exec(listen)
  const port = match ? Number(match[3]) : NaN
  if (!match || !Number.isInteger(port) || port < 0 || port > 65535) {
    return fail(`--listen ${listen}: expected HOST:PORT (port 0 picks a free one)`)
  }
  return Effect.succeed({ host: match[1] || match[2] || "127.0.0.1", port })
}

export const parseRoles = (roles: string): Effect.Effect<ReadonlyArray<string>, NodeStartError> => {
  const list = [...new Set(roles.split(",").map((r) => r.trim()).filter((r) => r !== ""))]
  const unknown = list.filter((r) => !(r in roleActors))
  return unknown.length > 0
    ? fail(`unknown role${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")}; known roles: ${Object.keys(roleActors).join(", ")}`)
    : Effect.succeed(list)
}

/** Runs a node until interrupted (SIGINT/SIGTERM under `NodeRuntime.runMain`). */
export const runNode = (args: NodeArgs) =>
  Effect.gen(function*() {
    const { ActorSystem, Node } = yield* loadRuntime
    const { host, port } = yield* parseListen(args.listen)
    if (!(args.downAfter > 0)) return yield* fail("--down-after must be a positive number of seconds")
    const actors = args.roles.reduce<Layer.Layer<never, unknown, ActorSystem | Node.CurrentNode>>(
      (layer, role) => Layer.merge(layer, roleActors[role]!.actors({ rolloutOnStop: Option.getOrUndefined(args.rolloutOnStop) })),
      Layer.empty
    )
    const config: Node.NodeConfig = {
      host,
      port,
      join: args.join,
      roles: args.roles,
      dataDir: args.data,
      downAfter: `${args.downAfter} seconds`,
      maxFrameBytes: args.maxFrameBytes,
      ...(Option.isSome(args.secretFile) ? { secretFile: args.secretFile.value } : {}),
      ...(Option.isSome(args.id) ? { id: args.id.value } : {}),
      ...(Option.isSome(args.advertise) ? { advertise: args.advertise.value } : {})
    }
    return yield* Effect.gen(function*() {
      const node = yield* Node.CurrentNode
      const system = yield* ActorSystem
      const actorNames = system.localActors().filter((a) => !a.system).map((a) => a.name)
      const secretFlag = node.secret.path ? ` --secret-file ${node.secret.path}` : ""
      yield* Console.log(
        [
          `reins node ${node.id} listening on ${node.address}`,
          `  roles: ${node.roles.join(", ") || "none"}; actors: ${actorNames.join(", ") || "none"}`,
          `  ${Node.secretHint(node)}`,
          `  join it:  npx reins node --roles ROLES --listen HOST:PORT --join ${node.address}${secretFlag} --data OTHER_DIR`,
          `  inspect:  npx reins status --join ${node.address}${secretFlag}`,
          `  stop: Ctrl-C (SIGINT) or SIGTERM`
        ].join("\n")
      )
      return yield* Effect.never
    }).pipe(Effect.provide(Node.layer(config, actors)))
  })

const roleHelp = Object.entries(roleActors).map(([name, role]) => `${name}: ${role.description}`).join("; ")

const roles = Options.text("roles").pipe(
  Options.withDefault(""),
  Options.withDescription(`Comma-separated roles; each starts its actors. ${roleHelp}.`)
)
const listen = Options.text("listen").pipe(
  Options.withDefault(DEFAULT_LISTEN),
  Options.withDescription("HOST:PORT to listen on (one port for all peers; port 0 picks a free one).")
)
const join = Options.text("join").pipe(
  Options.repeated,
  Options.withDescription("ws://HOST:PORT of any member to join through (repeat for fallbacks).")
)
const data = Options.directory("data").pipe(
  Options.withDefault(DEFAULT_DATA),
  Options.withDescription("Data directory: node id, lock, generated cluster secret. One per node.")
)
const secretFile = Options.file("secret-file", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription(
    "File holding the cluster secret. Default: $REINS_CLUSTER_SECRET, else DATA/cluster-secret (generated on first start)."
  )
)
const downAfter = Options.float("down-after").pipe(
  Options.withDefault(4),
  Options.withDescription("Seconds of silence after which a member is marked down (heartbeats every ≤1 s).")
)
const maxFrameBytes = Options.integer("max-frame-bytes").pipe(
  Options.withDefault(64 * 1024 * 1024),
  Options.withDescription("Largest message accepted; a bigger one closes that connection.")
)
const id = Options.text("id").pipe(Options.optional, Options.withDescription("Node id (default: stored in DATA/node-id)."))
const advertise = Options.text("advertise").pipe(
  Options.optional,
  Options.withDescription("ws://HOST:PORT other nodes use to reach this one (default: from --listen).")
)

const rolloutOnStop = Options.choice("rollout-on-stop", ["delete", "leave"]).pipe(
  Options.optional,
  Options.withDescription(
    "What stopping this node (SIGTERM) does to the Kubernetes Jobs of its `rollout` role: delete them (their attempts are retried elsewhere), " +
      "or leave them running for the controller to hand to another rollout node (rolling updates). Default: $REINS_ROLLOUT_ON_STOP, else delete."
  )
)

const nodeOptions = { roles, listen, join, data, secretFile, downAfter, maxFrameBytes, id, advertise, rolloutOnStop }

export const node = Command.make(
  "node",
  nodeOptions,
  (args) =>
    Effect.flatMap(parseRoles(args.roles), (list) => runNode({ ...args, roles: list })).pipe(failWith("reins node"))
).pipe(Command.withDescription("Run a node of a reins cluster (until SIGINT/SIGTERM)."))
