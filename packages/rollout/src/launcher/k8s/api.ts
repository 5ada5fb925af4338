/**
 * The few Kubernetes API calls the launcher makes, as Effects over @kubernetes/client-node, with
 * one error type and one retry rule: 429, 5xx and network errors are retried with exponential
 * backoff and jitter (a server's Retry-After is honoured); everything else (400, 403, 404, 409,
 * 422, ...) is returned at once for the caller to interpret.
 *
 * The verbs used are exactly those `examples/k8s/rbac.yaml` grants: Jobs create, get, list,
 * watch, patch (a take-over relabels the owner), delete; pods get, list, watch; pods/log get.
 */
import type { KubeConfig, V1Job } from "@kubernetes/client-node"
import { Data, Duration, Effect, Option } from "effect"
import type { KubeClient } from "./client.js"

export class KubeRequestError extends Data.TaggedError("KubeRequestError")<{
  readonly operation: string
  /** HTTP status; null for network errors. */
  readonly status: number | null
  /** The `reason` of the API server's Status (AlreadyExists, Invalid, NotFound, ...). */
  readonly reason: string | null
  readonly message: string
  readonly retryAfterMs: number | null
}> {}

export interface RetryPolicy {
  /** Retries after the first try. */
  readonly times: number
  readonly baseMs: number
  readonly maxMs: number
}

export const defaultRetry: RetryPolicy = { times: 6, baseMs: 100, maxMs: 5_000 }

export const isRetryableStatus = (e: KubeRequestError) => e.status === null || e.status === 429 || e.status >= 500

const toKubeError = (client: KubeClient, operation: string) => (e: unknown): KubeRequestError => {
  if (e instanceof client.ApiException) {
    const body = (typeof e.body === "string" ? Option.getOrUndefined(parseJson(e.body)) : e.body) as { reason?: string; message?: string } | undefined
    const retryAfter = Number(e.headers?.["retry-after"])
    return new KubeRequestError({
      operation,
      status: e.code,
      reason: body?.reason ?? null,
      message: `${operation}: HTTP ${e.code}${body?.reason ? ` ${body.reason}` : ""}: ${body?.message ?? (typeof e.body === "string" ? e.body : "no message")}`,
      retryAfterMs: Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter * 1000 : null
    })
  }
  return new KubeRequestError({ operation, status: null, reason: null, message: `${operation}: ${(e as Error)?.message ?? String(e)}`, retryAfterMs: null })
}

const parseJson = Option.liftThrowable((s: string): unknown => JSON.parse(s))

export interface ListResult<A> {
  readonly items: ReadonlyArray<A>
  readonly resourceVersion: string | undefined
}

const listResult = <A>(l: { readonly items: Array<A>; readonly metadata?: { readonly resourceVersion?: string } }): ListResult<A> => ({
  items: l.items,
  resourceVersion: l.metadata?.resourceVersion
})

export type KubeApi = ReturnType<typeof makeKubeApi>

/** `client`: the library, as `kubeClient` imported it (./client.ts). */
export const makeKubeApi = (client: KubeClient, kc: KubeConfig, retry: RetryPolicy = defaultRetry) => {
  const batch = kc.makeApiClient(client.BatchV1Api)
  const core = kc.makeApiClient(client.CoreV1Api)

  const call = <A>(operation: string, f: () => Promise<A>): Effect.Effect<A, KubeRequestError> => {
    const once = Effect.tryPromise({ try: f, catch: toKubeError(client, operation) })
    const loop = (attempt: number): Effect.Effect<A, KubeRequestError> =>
      Effect.catchIf(once, (e) => isRetryableStatus(e) && attempt < retry.times, (e) => {
        const backoff = Math.min(retry.maxMs, retry.baseMs * 2 ** attempt) * (0.5 + Math.random() / 2)
        const delay = Math.max(backoff, Math.min(e.retryAfterMs ?? 0, 60_000))
        return Effect.logDebug(`${e.message}; retrying in ${Math.round(delay)} ms`).pipe(
          Effect.zipRight(Effect.sleep(Duration.millis(delay))),
          Effect.zipRight(loop(attempt + 1))
        )
      })
    return loop(0)
  }

  return {
    createJob: (namespace: string, body: V1Job) => call(`create Job ${body.metadata?.name}`, () => batch.createNamespacedJob({ namespace, body })),
    readJob: (namespace: string, name: string): Effect.Effect<Option.Option<V1Job>, KubeRequestError> =>
      call(`read Job ${name}`, () => batch.readNamespacedJob({ namespace, name })).pipe(
        Effect.map(Option.some),
        Effect.catchIf((e) => e.status === 404, () => Effect.succeed(Option.none()))
      ),
    /** Background propagation: the Job goes at once, its pods are garbage-collected. 404 counts as done. */
    deleteJob: (namespace: string, name: string): Effect.Effect<void, KubeRequestError> =>
      call(`delete Job ${name}`, () => batch.deleteNamespacedJob({ namespace, name, propagationPolicy: "Background" })).pipe(
        Effect.asVoid,
        Effect.catchIf((e) => e.status === 404, () => Effect.void)
      ),
    listJobs: (namespace: string, labelSelector: string) =>
      call(`list Jobs in ${namespace}`, () => batch.listNamespacedJob({ namespace, labelSelector })).pipe(Effect.map(listResult)),
    listPods: (namespace: string, labelSelector: string) =>
      call(`list pods in ${namespace}`, () => core.listNamespacedPod({ namespace, labelSelector })).pipe(Effect.map(listResult)),
    readPodLog: (namespace: string, name: string, container: string, limitBytes: number) =>
      call(`read log of pod ${name}`, () => core.readNamespacedPodLog({ namespace, name, container, limitBytes })),
    /**
     * Relabels a Job's owner (a JSON patch whose `test` op makes it a compare-and-swap: of two
     * launchers taking over the same Job, the second gets 422 and the Job stays with the first).
     */
    patchJobOwner: (namespace: string, name: string, label: string, from: string | undefined, to: string) => {
      const path = `/metadata/labels/${label.replace(/~/g, "~0").replace(/\//g, "~1")}`
      const body = from === undefined ? [{ op: "add", path, value: to }] : [{ op: "test", path, value: from }, { op: "replace", path, value: to }]
      return call(`relabel Job ${name}`, () => batch.patchNamespacedJob({ namespace, name, body }))
    },
    watcher: new client.Watch(kc)
  }
}
