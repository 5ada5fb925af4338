/**
 * Following Jobs this launcher did not create in this incarnation:
 *
 * - `adopt`: after a restart, the Jobs labelled with this launcher's own owner identity (the
 *   same node id after a kill -9 and restart). Never another owner's: two rollout nodes must not
 *   follow — and on shutdown delete — each other's Jobs.
 * - `takeOver`: the Jobs of attempts a controller explicitly hands to this launcher, whoever
 *   owns them (a node that went down or was replaced in a rolling update). The Job is read by
 *   its name (a function of the attempt id) and relabelled to this owner with a compare-and-swap
 *   patch, so that exactly one launcher follows it; a Job that no longer exists is reported gone.
 */
import type { V1Job } from "@kubernetes/client-node"
import { AttemptInfraFailed, type HandedAttempt, type LaunchError } from "@reins/protocol"
import { Effect, Option, type Scope } from "effect"
import { mkdir } from "node:fs/promises"
import { attemptFiles } from "../../harness/files.js"
import type { AdoptedAttempt, AttemptHandle } from "../Launcher.js"
import type { KubeApi } from "./api.js"
import { toApiError } from "./create.js"
import type { FailureLog } from "./failureLog.js"
import type { Followed } from "./follow.js"
import {
  ANNOTATION_ATTEMPT_ID,
  ANNOTATION_CONTAINER,
  ANNOTATION_GIVE_UP_AT,
  ANNOTATION_MAX_LOG_BYTES,
  ANNOTATION_ROLLOUT_ID,
  jobName,
  LABEL_OWNER,
  labelValue,
  ownerOf,
  ownerSelector
} from "./names.js"
import type { JobTracker } from "./tracker.js"

export interface AdoptionDeps {
  readonly api: KubeApi
  readonly tracker: JobTracker
  readonly dataDir: string
  /** This launcher's owner identity. */
  readonly owner: string
  readonly namespaces: ReadonlyArray<string>
  readonly handles: Map<string, AttemptHandle>
  readonly watchNamespace: (namespace: string) => Effect.Effect<void>
  readonly startFollowing: (f: Followed) => Effect.Effect<AttemptHandle, never, Scope.Scope>
  readonly failures: FailureLog
}

export const makeAdoption = (deps: AdoptionDeps) => {
  const { api } = deps
  const ownerLabel = labelValue(deps.owner)

  /** Follows an existing Job from what its annotations say (null: it names no attempt). */
  const adoptJob = (namespace: string, job: V1Job): Effect.Effect<AdoptedAttempt | null, never, Scope.Scope> =>
    Effect.gen(function*() {
      const name = job.metadata?.name
      const a = job.metadata?.annotations ?? {}
      const attemptId = a[ANNOTATION_ATTEMPT_ID]
      if (name === undefined || attemptId === undefined) {
        yield* Effect.logWarning(`Job ${name ?? "(unnamed)"} has reins labels but no ${ANNOTATION_ATTEMPT_ID} annotation; not adopted`)
        return null
      }
      const existing = deps.handles.get(name)
      if (existing !== undefined) return { _tag: "Following", handle: existing } as const
      const files = attemptFiles(deps.dataDir, attemptId)
      yield* Effect.promise(() => mkdir(files.dir, { recursive: true }))
      deps.tracker.track(namespace, name, job)
      const created = job.metadata?.creationTimestamp
      const handle = yield* deps.startFollowing({
        namespace,
        name,
        rolloutId: a[ANNOTATION_ROLLOUT_ID] ?? "",
        attemptId,
        container: a[ANNOTATION_CONTAINER],
        maxLogBytes: Number(a[ANNOTATION_MAX_LOG_BYTES] ?? 1 << 20),
        giveUpAt: Number(a[ANNOTATION_GIVE_UP_AT] ?? Date.now() + 3_600_000),
        startedAt: created === undefined ? Date.now() : new Date(created).getTime(),
        files
      })
      return { _tag: "Following", handle } as const
    })

  const adopt: Effect.Effect<ReadonlyArray<AdoptedAttempt>, LaunchError, Scope.Scope> = Effect.gen(function*() {
    const out: Array<AdoptedAttempt> = []
    const selector = ownerSelector(deps.owner)
    for (const namespace of deps.namespaces) {
      yield* deps.watchNamespace(namespace)
      const { items } = yield* api.listJobs(namespace, selector).pipe(Effect.mapError(toApiError))
      for (const job of items) {
        const adopted = yield* adoptJob(namespace, job)
        if (adopted !== null) out.push(adopted)
      }
    }
    return out
  })

  const gone = (attemptId: string, rolloutId: string | null, message: string): AdoptedAttempt => ({
    _tag: "Reaped",
    rolloutId,
    attemptId,
    outcome: new AttemptInfraFailed({ reason: "lost", retryable: true, message, durationMs: 0, logs: null })
  })

  /** One handed attempt: followed, gone, or (an API error, another launcher won the race) neither. */
  const takeOne = (h: HandedAttempt): Effect.Effect<AdoptedAttempt | null, never, Scope.Scope> =>
    Effect.gen(function*() {
      const name = jobName(h.attemptId)
      const followed = deps.handles.get(name)
      if (followed !== undefined) return { _tag: "Following", handle: followed } as const
      yield* deps.watchNamespace(h.namespace)
      const found = yield* api.readJob(h.namespace, name)
      if (Option.isNone(found)) return gone(h.attemptId, null, `its Job ${name} no longer exists`)
      const job = found.value
      if (job.metadata?.annotations?.[ANNOTATION_ATTEMPT_ID] !== h.attemptId) return gone(h.attemptId, null, `Job ${name} belongs to another attempt`)
      const current = ownerOf(job)
      const mine = current === ownerLabel ? job : yield* api.patchJobOwner(h.namespace, name, LABEL_OWNER, current, ownerLabel)
      yield* Effect.logInfo(`took over Job ${name} (attempt ${h.attemptId}) from launcher ${current ?? "(none)"}`)
      return yield* adoptJob(h.namespace, mine)
    }).pipe(
      Effect.catchAll((e) =>
        e.status === 404
          ? Effect.succeed(gone(h.attemptId, null, `its Job ${jobName(h.attemptId)} no longer exists`))
          : Effect.as(deps.failures.warn(`take over ${e.status ?? "network"}`, `could not take over Job ${jobName(h.attemptId)}: ${e.message}`), null)
      )
    )

  const takeOver = (attempts: ReadonlyArray<HandedAttempt>): Effect.Effect<ReadonlyArray<AdoptedAttempt>, never, Scope.Scope> =>
    Effect.map(Effect.forEach(attempts, takeOne, { concurrency: 8 }), (found) => found.filter((a) => a !== null))

  return { adopt, takeOver }
}
