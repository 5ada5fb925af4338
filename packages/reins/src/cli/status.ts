/**
 * `reins status --join ws://HOST:PORT [--json]`: the members of a cluster as the node at that
 * address sees them (id, address, roles, up/down, last heartbeat, actors). Connects as a client with the cluster
 * secret and asks the node's system actor.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type { ClusterStatus } from "@reins/runtime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { DEFAULT_DATA, failWith } from "./node.js"
import { table } from "./rolloutsFormat.js"

const ago = (at: number | undefined, now: number) => (at === undefined ? "-" : `${Math.max(0, (now - at) / 1000).toFixed(1)}s ago`)

const statusTable = (status: ClusterStatus): string => {
  const now = Date.now()
  return table([["ID", "STATUS", "ADDRESS", "ROLES", "HEARTBEAT", "ACTORS"]].concat(
    status.nodes.map((n) => [n.id, n.status, n.address, n.roles.join(",") || "-", ago(n.lastHeartbeat, now), n.actors.join(",") || "-"])
  ))
}

const join = Options.text("join").pipe(Options.withDescription("ws://HOST:PORT of any member."))
const json = Options.boolean("json").pipe(Options.withDescription('Print {"nodes":[{"id","address","roles","status","since","lastHeartbeat","actors","incarnation"}]} as JSON (times in ms since epoch).'))
const secretFile = Options.file("secret-file", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription("File holding the cluster secret. Default: $REINS_CLUSTER_SECRET, else DATA/cluster-secret.")
)
const data = Options.directory("data").pipe(
  Options.withDefault(DEFAULT_DATA),
  Options.withDescription("Data directory of a local node whose cluster-secret to use.")
)
const timeout = Options.float("timeout").pipe(Options.withDefault(10), Options.withDescription("Seconds to wait for an answer."))

export const status = Command.make("status", { join, json, secretFile, data, timeout }, (args) =>
  Effect.gen(function*() {
    const { Cluster, Secret } = yield* Effect.promise(() => import("@reins/runtime"))
    const { secret } = yield* Secret.load({ secretFile: Option.getOrUndefined(args.secretFile), dataDir: args.data, generate: false })
    const result = yield* Cluster.status({ join: args.join, secret }).pipe(
      Effect.timeoutFail({ duration: `${args.timeout} seconds`, onTimeout: () => new Error(`no answer from ${args.join} within ${args.timeout} s`) })
    )
    yield* Console.log(args.json ? JSON.stringify(result) : statusTable(result))
  }).pipe(
    failWith("reins status"),
    Logger.withMinimumLogLevel(LogLevel.Error)
  )).pipe(Command.withDescription("Show the members of a cluster: id, address, roles, up/down, last heartbeat, actors."))
