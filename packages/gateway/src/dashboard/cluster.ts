/**
 * The cluster as the Gateway's node sees it, for the dashboard's Cluster page: the members of its
 * actor system (roles, address, up/down and since when, when it last had news of each), and the launchers' slots as the rollout
 * controller reports them. A Gateway without an actor system (a bare `reins serve`) has no
 * cluster to show; a controller that does not answer in time is reported as such rather than
 * holding the page.
 */
import { ControllerRpcs } from "@reins/protocol"
import type { ActorSystem } from "@reins/runtime"
import { Effect, Option } from "effect"

const CONTROLLER_TIMEOUT = "2 seconds"

export interface ClusterJson {
  readonly node: string | null
  readonly nodes: ReadonlyArray<{ readonly id: string; readonly address: string; readonly roles: ReadonlyArray<string>; readonly status: string; readonly since: number; readonly last_heartbeat: number | null; readonly actors: ReadonlyArray<string> }>
  /** null: no controller answered (none in the cluster, or it did not reply in time). */
  readonly launchers: ReadonlyArray<{ readonly node: string; readonly kind: string; readonly max: number; readonly running: number; readonly free: number }> | null
  readonly controller: { readonly waiting: number; readonly running: number; readonly ended: number } | null
}

export const clusterView = (system: Option.Option<ActorSystem["Type"]>): Effect.Effect<ClusterJson> =>
  Option.match(system, {
    onNone: () => Effect.succeed({ node: null, nodes: [], launchers: null, controller: null }),
    onSome: (s) =>
      Effect.gen(function* () {
        const members = yield* s.members
        const status = yield* s.ref(ControllerRpcs, "controller").pipe(
          Effect.flatMap((ref) => ref.Status()),
          Effect.timeout(CONTROLLER_TIMEOUT),
          Effect.option
        )
        return {
          node: s.node,
          nodes: members.map((m) => ({ id: m.id, address: m.address, roles: m.roles, status: m.status, since: m.since, last_heartbeat: m.lastHeartbeat ?? null, actors: m.actors })),
          launchers: Option.match(status, {
            onNone: () => null,
            onSome: (c) => c.launchers.map((l) => ({ node: l.node, kind: l.kind, max: l.max, running: l.running, free: Math.max(0, l.max - l.running) }))
          }),
          controller: Option.match(status, { onNone: () => null, onSome: (c) => ({ waiting: c.waiting, running: c.running, ended: c.ended }) })
        }
      })
  })
