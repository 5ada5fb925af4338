/**
 * An attempt's captured logs for the dashboard, from the launcher that ran it, wherever in the
 * cluster that is: every launcher actor (`rollout/<node>`) of an up member is asked (`Logs`, at
 * once, each bounded by a timeout) and the first that has any answers. Launchers keep them under
 * their node's data directory, so a Gateway without an actor system (a bare `reins serve`) has
 * no launcher to ask.
 */
import { type AttemptLogTail, LAUNCHER_ACTOR_PREFIX, LauncherRpcs } from "@reins/protocol"
import type { ActorSystem } from "@reins/runtime"
import { Effect, Option } from "effect"

const LAUNCHER_TIMEOUT = "2 seconds"

export interface AttemptLogs {
  readonly logs: ReadonlyArray<AttemptLogTail>
  /** Why there are none (null when there are). */
  readonly reason: string | null
}

export const attemptLogsFromCluster = (system: Option.Option<ActorSystem["Type"]>, attemptId: string): Effect.Effect<AttemptLogs> =>
  Option.match(system, {
    onNone: () => Effect.succeed({ logs: [], reason: "this Gateway runs without a cluster node, so there is no launcher to ask" }),
    onSome: (s) =>
      Effect.gen(function* () {
        const members = yield* s.members
        const launchers = members.filter((m) => m.status === "up").flatMap((m) => m.actors.filter((a) => a.startsWith(LAUNCHER_ACTOR_PREFIX)))
        if (launchers.length === 0) return { logs: [], reason: "no launcher is up in the cluster" }
        const answers = yield* Effect.forEach(
          launchers,
          (name) =>
            s.ref(LauncherRpcs, name).pipe(
              Effect.flatMap((ref) => ref.Logs({ attemptId })),
              Effect.timeout(LAUNCHER_TIMEOUT),
              Effect.option
            ),
          { concurrency: "unbounded" }
        )
        const found = answers.flatMap((a) => Option.toArray(a)).find((logs) => logs.length > 0)
        return found === undefined
          ? { logs: [], reason: `no logs of it at the ${launchers.length} launcher(s) up (it never started, or its launcher's node is gone or did not answer)` }
          : { logs: found, reason: null }
      })
  })
