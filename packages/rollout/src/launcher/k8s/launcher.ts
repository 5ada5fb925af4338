/**
 * The Kubernetes Job launcher: one Job per attempt, followed by watch + reconcile, logs captured
 * at the end, cancel = delete (Background propagation).
 *
 * - Job names derive from attempt ids, so a create that already happened (a retried request, a
 *   restarted controller) gets 409 and the existing Job is adopted: an attempt never runs twice.
 * - Creates go through a token bucket; 429/5xx are retried with backoff (api.ts); 422 Invalid
 *   and other rejections are `JobRejectedError` (not retryable: the same spec would fail again).
 * - One follower fiber per attempt waits for the verdict (classify.ts), deletes Jobs stuck on
 *   infrastructure trouble (an image that cannot be pulled would otherwise wait for its
 *   deadline), captures the pod log and completes the attempt's outcome.
 * - `adopt` finds this controller's Jobs by label after a restart and follows them.
 * - Closing a launch's scope deletes its Job (`onScopeClose: "delete"`, the default) or leaves it
 *   running for a successor to adopt (`"leave"`, for rolling controller restarts).
 */
import type { V1Job } from "@kubernetes/client-node"
import {
  AttemptCancelled,
  AttemptFailed,
  AttemptInfraFailed,
  type AttemptLogs,
  type AttemptOutcome,
  AttemptSucceeded,
  type HarnessSpec,
  JobNameConflictError,
  JobRejectedError,
  type KubernetesHarnessSpec,
  KubernetesApiError,
  type LaunchConfigError,
  type LaunchError
} from "@reins/protocol"
import { Context, Deferred, Duration, Effect, Fiber, Layer, Option, Scope } from "effect"
import { mkdir } from "node:fs/promises"
import { attemptVariables } from "../../harness/env.js"
import { type AttemptFiles, attemptFiles, prepareAttemptFiles } from "../../harness/files.js"
import { taskInputJson } from "../../harness/env.js"
import { requireKubernetes } from "../../harness/spec.js"
import type { AdoptedAttempt, AttemptHandle, AttemptSpec, Launcher } from "../Launcher.js"
import { defaultRetry, type KubeRequestError, makeKubeApi, type RetryPolicy } from "./api.js"
import { classifyJob, type JobVerdict } from "./classify.js"
import { type KubeConfigSource, loadKubeConfig } from "./config.js"
import { capturePodLogs } from "./logs.js"
import {
  ANNOTATION_ATTEMPT_ID,
  ANNOTATION_CONTAINER,
  ANNOTATION_GIVE_UP_AT,
  ANNOTATION_MAX_LOG_BYTES,
  ANNOTATION_ROLLOUT_ID,
  controllerSelector,
  jobName,
  LABEL_ATTEMPT,
  labelValue,
  TASK_FILE_IN_POD
} from "./names.js"
import { buildJob, defaultJobTemplate, type JobTemplate, loadJobTemplateFile } from "./template.js"
import { makeTokenBucket, type RateLimit } from "./tokenBucket.js"
import { JobTracker } from "./tracker.js"
import { followCollection, type WatchStats } from "./watch.js"

export interface KubernetesLauncherOptions {
  /** Pod logs and task files go under `<dataDir>/attempts/`. */
  readonly dataDir: string
  readonly kubeConfig?: KubeConfigSource
  /** Labels this controller's Jobs; `adopt` only takes Jobs with the same id. Default "reins". */
  readonly controllerId?: string
  /** Namespaces `adopt` looks in (launch watches the namespace of each spec). Default ["default"]. */
  readonly namespaces?: ReadonlyArray<string>
  /** Overrides the spec's `job_template` file: a template written in code. */
  readonly jobTemplate?: JobTemplate
  /** Job creations per second (token bucket). Default 10/s, bursts of 20. */
  readonly createRate?: RateLimit
  /** Full relist period, on top of the watch. Default 30 s. */
  readonly reconcileInterval?: Duration.DurationInput
  readonly retry?: RetryPolicy
  readonly onScopeClose?: "delete" | "leave"
}

export interface KubernetesJobLauncher extends Launcher {
  readonly kind: "kubernetes"
  /** Watch/relist counters per namespace and collection (observability; tests use them). */
  readonly stats: ReadonlyMap<string, WatchStats>
  /** Attempts currently followed. */
  readonly following: () => number
}

interface Followed {
  readonly namespace: string
  readonly name: string
  readonly rolloutId: string
  readonly attemptId: string
  readonly container: string | undefined
  readonly maxLogBytes: number
  readonly giveUpAt: number
  readonly startedAt: number
  readonly files: AttemptFiles
}

type Decision = JobVerdict | { readonly _tag: "Cancel"; readonly reason: string } | { readonly _tag: "GiveUp" }

const toApiError = (e: KubeRequestError) => new KubernetesApiError({ operation: e.operation, status: e.status, message: e.message })

export const makeKubernetesLauncher = (
  options: KubernetesLauncherOptions
): Effect.Effect<KubernetesJobLauncher, LaunchConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const kc = yield* loadKubeConfig(options.kubeConfig)
    const api = makeKubeApi(kc, options.retry ?? defaultRetry)
    const controllerId = options.controllerId ?? "reins"
    const selector = controllerSelector(controllerId)
    const bucket = yield* makeTokenBucket(options.createRate ?? { perSecond: 10, burst: 20 })
    const tracker = new JobTracker(api)
    const launcherScope = yield* Effect.scope
    const stats = new Map<string, WatchStats>()
    const watched = new Map<string, Effect.Effect<void>>()
    const handles = new Map<string, AttemptHandle>()
    const templates = new Map<string, JobTemplate>()
    const reconcileEvery = options.reconcileInterval ?? Duration.seconds(30)
    const leaveJobs = options.onScopeClose === "leave"

    /** Starts the Job and pod watches of a namespace once, in the launcher's scope. */
    const watchNamespace = (namespace: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (watched.has(namespace)) return Effect.void
        watched.set(namespace, Effect.void)
        const jobStats: WatchStats = { watches: 0, relists: 0, events: 0 }
        const podStats: WatchStats = { watches: 0, relists: 0, events: 0 }
        stats.set(`${namespace}/jobs`, jobStats)
        stats.set(`${namespace}/pods`, podStats)
        return Effect.all([
          followCollection({
            api,
            path: `/apis/batch/v1/namespaces/${namespace}/jobs`,
            labelSelector: selector,
            list: api.listJobs(namespace, selector),
            onList: (jobs) => tracker.syncJobs(namespace, jobs),
            onEvent: (type, job) => tracker.onJobEvent(type, job),
            reconcileEvery,
            stats: jobStats
          }),
          followCollection({
            api,
            path: `/api/v1/namespaces/${namespace}/pods`,
            labelSelector: selector,
            list: api.listPods(namespace, selector),
            onList: (pods) => tracker.syncPods(namespace, pods),
            onEvent: (type, pod) => tracker.onPodEvent(type, pod),
            reconcileEvery,
            stats: podStats
          })
        ], { discard: true }).pipe(Scope.extend(launcherScope))
      })

    const templateFor = (k: KubernetesHarnessSpec) =>
      Effect.suspend(() => {
        if (options.jobTemplate !== undefined) return Effect.succeed(options.jobTemplate)
        if (k.job_template === undefined) return Effect.succeed(defaultJobTemplate)
        const cached = templates.get(k.job_template)
        if (cached !== undefined) return Effect.succeed(cached)
        return loadJobTemplateFile(k.job_template).pipe(Effect.tap((t) => templates.set(k.job_template!, t)))
      })

    const outcomeOf = (f: Followed, d: Decision, logs: AttemptLogs): AttemptOutcome => {
      const durationMs = Date.now() - f.startedAt
      switch (d._tag) {
        case "Succeeded":
          return new AttemptSucceeded({ exitCode: d.exitCode, durationMs, logs })
        case "Failed":
          return new AttemptFailed({ reason: d.reason, exitCode: d.exitCode, signal: null, message: d.message, durationMs, logs })
        case "Infra":
          return new AttemptInfraFailed({ reason: d.reason, retryable: d.retryable, message: d.message, durationMs, logs })
        case "Cancel":
          return new AttemptCancelled({ reason: d.reason, durationMs, logs })
        case "GiveUp":
          return new AttemptInfraFailed({
            reason: "lost",
            retryable: true,
            message: `Job ${f.name} did not end by ${new Date(f.giveUpAt).toISOString()} (unschedulable or stuck); deleted`,
            durationMs,
            logs
          })
        case "Running":
          throw new Error("unreachable: a running verdict is never final")
      }
    }

    const deleteQuietly = (f: Followed) =>
      api.deleteJob(f.namespace, f.name).pipe(Effect.catchAll((e) => Effect.logWarning(`could not delete Job ${f.name}: ${e.message}`)))

    /** The follower of one attempt: waits for the verdict, cleans up, captures logs, completes `done`. */
    const follow = (f: Followed, cancel: Deferred.Deferred<string>, done: Deferred.Deferred<AttemptOutcome>) =>
      Effect.gen(function*() {
        const decision: Decision = yield* Effect.raceAll([
          tracker.waitFor(f.name, (o) => {
            const v = classifyJob(o, f.container)
            return v._tag === "Running" ? Option.none() : Option.some<Decision>(v)
          }),
          Deferred.await(cancel).pipe(Effect.map((reason): Decision => ({ _tag: "Cancel", reason }))),
          Effect.sleep(Duration.millis(Math.max(0, f.giveUpAt - Date.now()))).pipe(Effect.as<Decision>({ _tag: "GiveUp" }))
        ])
        // A Job that has not ended by itself must not keep running (and holding a node).
        const ended = decision._tag === "Succeeded" || decision._tag === "Failed"
        if (!ended) yield* deleteQuietly(f)
        let final: Decision = decision
        if (ended) {
          // Pod events may lag the Job's: take a fresh look before the verdict is final (an
          // OOM-killed harness also fails its Job, but it is the infrastructure's failure).
          const pods = yield* Effect.either(api.listPods(f.namespace, `${LABEL_ATTEMPT}=${labelValue(f.attemptId)}`))
          if (pods._tag === "Right") tracker.setPods(f.name, pods.right.items)
          const fresh = classifyJob(tracker.observe(f.name), f.container)
          if (fresh._tag !== "Running") final = fresh
        }
        const logs = yield* capturePodLogs({
          api,
          namespace: f.namespace,
          pods: tracker.observe(f.name).pods,
          container: f.container,
          files: f.files,
          maxLogBytes: f.maxLogBytes
        })
        yield* Deferred.succeed(done, outcomeOf(f, final, logs))
      }).pipe(
        // The launcher is shutting down. "delete": no Job outlives it. "leave": the Job keeps
        // running for a successor to adopt, so this outcome must not cause a retry.
        Effect.onInterrupt(() =>
          leaveJobs
            ? Deferred.succeed(
              done,
              new AttemptInfraFailed({
                reason: "node-lost",
                retryable: false,
                message: `the launcher stopped following Job ${f.name}; it was left running for a successor to adopt`,
                durationMs: Date.now() - f.startedAt,
                logs: null
              })
            )
            : deleteQuietly(f).pipe(
              Effect.zipRight(Deferred.succeed(done, new AttemptCancelled({ reason: "launcher shut down", durationMs: Date.now() - f.startedAt, logs: null })))
            )
        ),
        Effect.ensuring(Effect.sync(() => {
          tracker.untrack(f.name)
          handles.delete(f.name)
        }))
      )

    /** Starts following a tracked Job; the handle's scope deletes (or leaves) it when closed. */
    const startFollowing = (f: Followed): Effect.Effect<AttemptHandle, never, Scope.Scope> =>
      Effect.gen(function*() {
        const cancel = yield* Deferred.make<string>()
        const done = yield* Deferred.make<AttemptOutcome>()
        const fiber = yield* Effect.forkIn(follow(f, cancel, done), launcherScope)
        const handle: AttemptHandle = {
          rolloutId: f.rolloutId,
          attemptId: f.attemptId,
          files: f.files,
          outcome: Deferred.await(done),
          cancel: (reason) => Deferred.succeed(cancel, reason).pipe(Effect.zipRight(Deferred.await(done)))
        }
        handles.set(f.name, handle)
        yield* Effect.addFinalizer(() =>
          leaveJobs ? Effect.asVoid(Fiber.interrupt(fiber)) : Effect.asVoid(handle.cancel("scope closed"))
        )
        return handle
      })

    const create = (namespace: string, job: V1Job, attemptId: string): Effect.Effect<V1Job, LaunchError> =>
      bucket.take.pipe(
        Effect.zipRight(api.createJob(namespace, job)),
        Effect.catchAll((e): Effect.Effect<V1Job, LaunchError> => {
          const name = job.metadata!.name!
          if (e.status === 409) {
            // Already there: ours (a retried create, a restarted controller) → adopt; else a conflict.
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
        })
      )

    const launch = (spec: AttemptSpec): Effect.Effect<AttemptHandle, LaunchError, Scope.Scope> =>
      Effect.gen(function*() {
        const k = yield* requireKubernetes(spec.harness)
        const name = jobName(spec.attemptId)
        const existing = handles.get(name)
        if (existing !== undefined) return existing // launched twice in this process: one Job, one follower
        const files = yield* prepareAttemptFiles(options.dataDir, spec.attemptId, spec.task, spec.taskExtra)
        const template = yield* templateFor(k)
        const giveUpAt = Date.now() + (spec.harness.timeout_s + spec.harness.grace_s + k.stuck_slack_s) * 1000
        const job = yield* buildJob(template, {
          params: templateParams(spec, spec.harness, k, name),
          controllerId,
          env: { ...spec.harness.env, ...attemptVariables({ identity: spec, task: spec.task, endpoints: spec.endpoints, taskFile: TASK_FILE_IN_POD }) },
          taskJson: taskInputJson(spec.task),
          maxLogBytes: spec.harness.max_log_bytes,
          container: k.container,
          serviceAccount: k.service_account,
          giveUpAt
        })
        yield* watchNamespace(k.namespace)
        tracker.track(k.namespace, name)
        const created = yield* create(k.namespace, job, spec.attemptId).pipe(Effect.tapError(() => Effect.sync(() => tracker.untrack(name))))
        tracker.track(k.namespace, name, created)
        return yield* startFollowing({
          namespace: k.namespace,
          name,
          rolloutId: spec.rolloutId,
          attemptId: spec.attemptId,
          container: created.metadata?.annotations?.[ANNOTATION_CONTAINER] ?? k.container,
          maxLogBytes: spec.harness.max_log_bytes,
          giveUpAt: Number(created.metadata?.annotations?.[ANNOTATION_GIVE_UP_AT] ?? giveUpAt),
          startedAt: Date.now(),
          files
        })
      }).pipe(Effect.withSpan("KubernetesLauncher.launch", { attributes: { attemptId: spec.attemptId } }))

    const adoptJob = (namespace: string, job: V1Job): Effect.Effect<Option.Option<AttemptHandle>, never, Scope.Scope> =>
      Effect.gen(function*() {
        const name = job.metadata?.name
        const a = job.metadata?.annotations ?? {}
        const attemptId = a[ANNOTATION_ATTEMPT_ID]
        if (name === undefined || attemptId === undefined) {
          yield* Effect.logWarning(`Job ${name ?? "(unnamed)"} has reins labels but no ${ANNOTATION_ATTEMPT_ID} annotation; not adopted`)
          return Option.none()
        }
        const existing = handles.get(name)
        if (existing !== undefined) return Option.some(existing)
        const files = attemptFiles(options.dataDir, attemptId)
        yield* Effect.promise(() => mkdir(files.dir, { recursive: true }))
        tracker.track(namespace, name, job)
        const created = job.metadata?.creationTimestamp
        return Option.some(
          yield* startFollowing({
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
        )
      })

    const adopt: Effect.Effect<ReadonlyArray<AdoptedAttempt>, LaunchError, Scope.Scope> = Effect.gen(function*() {
      const out: Array<AdoptedAttempt> = []
      for (const namespace of options.namespaces ?? ["default"]) {
        yield* watchNamespace(namespace)
        const { items } = yield* api.listJobs(namespace, selector).pipe(Effect.mapError(toApiError))
        for (const job of items) {
          const handle = yield* adoptJob(namespace, job)
          if (Option.isSome(handle)) out.push({ _tag: "Following", handle: handle.value })
        }
      }
      return out
    })

    return { kind: "kubernetes" as const, launch, adopt, stats, following: () => tracker.size }
  })

const templateParams = (spec: AttemptSpec, h: HarnessSpec, k: KubernetesHarnessSpec, name: string) => ({
  job_name: name,
  namespace: k.namespace,
  image: k.image,
  command: h.command,
  cwd: h.cwd ?? "",
  rollout_id: spec.rolloutId,
  attempt_id: spec.attemptId,
  task_id: spec.task.id,
  rollout_label: labelValue(spec.rolloutId),
  attempt_label: labelValue(spec.attemptId),
  timeout_s: h.timeout_s,
  grace_s: h.grace_s,
  ttl_s: k.ttl_s
})

export class KubernetesLauncher extends Context.Tag("@reins/rollout/KubernetesLauncher")<KubernetesLauncher, KubernetesJobLauncher>() {
  /** The launcher and its watches live as long as the layer. */
  static readonly layer = (options: KubernetesLauncherOptions) => Layer.scoped(KubernetesLauncher, makeKubernetesLauncher(options))
}
