/**
 * Creating an attempt's Job. Creates go through a token bucket; 429/5xx are retried with backoff
 * (api.ts). A 409 on a Job of the same attempt (a retried request, a restarted launcher) adopts
 * the existing Job: an attempt never runs twice; a 409 on another attempt's Job is a conflict.
 * 403, 422 and other rejections are `JobRejectedError` (not retryable: the same spec would fail
 * again). Every failure is also logged on the node, with the API's status and message,
 * rate-limited per status (failureLog.ts).
 */
import type { V1Job } from "@kubernetes/client-node"
import { JobNameConflictError, JobRejectedError, KubernetesApiError, type LaunchError } from "@reins/protocol"
import { Effect, Option } from "effect"
import type { KubeApi, KubeRequestError } from "./api.js"
import type { FailureLog } from "./failureLog.js"
import { ANNOTATION_ATTEMPT_ID } from "./names.js"
import type { TokenBucket } from "./tokenBucket.js"

export const toApiError = (e: KubeRequestError) => new KubernetesApiError({ operation: e.operation, status: e.status, message: e.message })

export const createJob = (
  deps: { readonly api: KubeApi; readonly bucket: TokenBucket; readonly failures: FailureLog },
  namespace: string,
  job: V1Job,
  attemptId: string
): Effect.Effect<V1Job, LaunchError> => {
  const { api } = deps
  const name = job.metadata!.name!
  return deps.bucket.take.pipe(
    Effect.zipRight(api.createJob(namespace, job)),
    Effect.catchAll((e): Effect.Effect<V1Job, LaunchError> => {
      if (e.status === 409) {
        // Already there: ours (a retried create, a restarted launcher) → adopt; else a conflict.
        return api.readJob(namespace, name).pipe(
          Effect.mapError(toApiError),
          Effect.flatMap((existing) => {
            const owner = Option.getOrUndefined(existing)?.metadata?.annotations?.[ANNOTATION_ATTEMPT_ID] ?? null
            return Option.isSome(existing) && owner === attemptId
              ? Effect.succeed(existing.value)
              : Effect.fail(
                new JobNameConflictError({ jobName: name, attemptId, existingAttemptId: owner, message: `Job ${name} exists and belongs to attempt ${owner ?? "(unknown)"}` })
              )
          })
        )
      }
      if (e.status !== null && e.status >= 400 && e.status < 500 && e.status !== 429) {
        return Effect.fail(new JobRejectedError({ status: e.status, reason: e.reason ?? "Rejected", jobName: name, message: e.message }))
      }
      return Effect.fail(toApiError(e))
    }),
    Effect.tapError((e) =>
      deps.failures.warn(
        `create ${e._tag === "JobRejectedError" || e._tag === "KubernetesApiError" ? e.status ?? "network" : e._tag}`,
        `could not create Job ${name} in namespace ${namespace}: ${e.message}`
      )
    )
  )
}
