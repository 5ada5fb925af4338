/**
 * The Kubernetes Job launcher: one Job per attempt, followed by watch + reconcile, logs captured
 * at the end, cancel = delete (Background propagation).
 *
 * - Job names derive from attempt ids, so a create that already happened (a retried request, a
 *   restarted launcher) gets 409 and the existing Job is adopted: an attempt never runs twice
 *   (create.ts).
 * - Every Job is owned by the launcher that created it (`owner`, the `reins.dev/owner` label):
 *   `adopt` follows only this owner's Jobs after a restart, and only the owner deletes a Job.
 *   `takeOver` follows Jobs a controller hands over from a launcher that went away (adopt.ts).
 * - One follower fiber per attempt waits for the verdict (follow.ts, classify.ts).
 * - Closing a launch's scope deletes its Job (`onScopeClose: "delete"`, the default) or leaves it
 *   running for another launcher to take over (`"leave"`, for rolling updates of rollout nodes).
 * - A kubeconfig the client library would refuse (plain HTTP without insecure-skip-tls-verify)
 *   is reported at start, and every launch fails with that reason instead of a network error.
 */
import type { V1Job } from "@kubernetes/client-node"
import { type HarnessSpec, type KubernetesHarnessSpec, LaunchConfigError, type LaunchError } from "@reins/protocol"
import { Duration, Effect, Scope } from "effect"
import { attemptVariables, taskInputJson } from "../../harness/env.js"
import { prepareAttemptFiles } from "../../harness/files.js"
import { requireKubernetes } from "../../harness/spec.js"
import type { AttemptHandle, AttemptSpec, Launcher } from "../Launcher.js"
import { makeAdoption } from "./adopt.js"
import { makeKubeApi, type RetryPolicy } from "./api.js"
import { kubeClient } from "./client.js"
import { clientRefusal, type KubeConfigSource, loadKubeConfig } from "./config.js"
import { createJob } from "./create.js"
import { makeFailureLog } from "./failureLog.js"
import { makeFollower } from "./follow.js"
import { ANNOTATION_CONTAINER, ANNOTATION_GIVE_UP_AT, jobName, labelValue, ownerSelector, REINS_SELECTOR, TASK_FILE_IN_POD } from "./names.js"
import { buildJob, defaultJobTemplate, type JobTemplate, loadJobTemplateFile } from "./template.js"
import { makeTokenBucket, type RateLimit } from "./tokenBucket.js"
import { JobTracker } from "./tracker.js"
import { followCollection, type FollowOptions, type WatchStats } from "./watch.js"

export interface KubernetesLauncherOptions {
  /** Pod logs and task files go under `<dataDir>/attempts/`. */
  readonly dataDir: string
  readonly kubeConfig?: KubeConfigSource
  /**
   * This launcher's identity, recorded as the owner of every Job it creates (`reins.dev/owner`):
   * `adopt` only follows Jobs of the same owner, and only their owner deletes Jobs. Must be
   * unique per launcher and stable across its restarts: a rollout node uses its node id (the
   * pod name in examples/k8s/). Default "reins".
   */
  readonly owner?: string
  /** Namespaces `adopt` looks in (launch watches the namespace of each spec). Default ["default"]. */
  readonly namespaces?: ReadonlyArray<string>
  /** Overrides the spec's `job_template` file: a template written in code. */
  readonly jobTemplate?: JobTemplate
  /** Job creations per second (token bucket). Default 10/s, bursts of 20. */
  readonly createRate?: RateLimit
  /** Full relist period, on top of the watch. Default 30 s. */
  readonly reconcileInterval?: Duration.DurationInput
  readonly retry?: RetryPolicy
  /** What stopping does to running Jobs: `delete` them (default), or `leave` them for another launcher to take over. */
  readonly onScopeClose?: "delete" | "leave"
}

export interface KubernetesJobLauncher extends Launcher {
  readonly kind: "kubernetes"
  readonly owner: string
  /** Watch/relist counters per namespace and collection (observability; tests use them). */
  readonly stats: ReadonlyMap<string, WatchStats>
  /** Attempts currently followed. */
  readonly following: () => number
}

export const makeKubernetesLauncher = (
  options: KubernetesLauncherOptions
): Effect.Effect<KubernetesJobLauncher, LaunchConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const kc = yield* loadKubeConfig(options.kubeConfig)
    const api = makeKubeApi(yield* kubeClient, kc, options.retry)
    const owner = options.owner ?? "reins"
    const ownerLabel = labelValue(owner)
    const bucket = yield* makeTokenBucket(options.createRate ?? { perSecond: 10, burst: 20 })
    const tracker = new JobTracker(api)
    const failures = makeFailureLog()
    const launcherScope = yield* Effect.scope
    const stats = new Map<string, WatchStats>()
    const watched = new Set<string>()
    const handles = new Map<string, AttemptHandle>()
    const templates = new Map<string, JobTemplate>()
    const reconcileEvery = options.reconcileInterval ?? Duration.seconds(30)
    const refusal = clientRefusal(kc)
    if (refusal !== null) yield* Effect.logError(`Kubernetes launcher: ${refusal}. Every launch on this node fails until it restarts with a fixed kubeconfig.`)

    /** Starts the Job and pod watches of a namespace once, in the launcher's scope. */
    const watchNamespace = (namespace: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (watched.has(namespace) || refusal !== null) return Effect.void
        watched.add(namespace)
        const follow = <A>(collection: "jobs" | "pods", source: Pick<FollowOptions<A>, "path" | "labelSelector" | "list" | "onList" | "onEvent">) => {
          const counters: WatchStats = { watches: 0, relists: 0, events: 0 }
          stats.set(`${namespace}/${collection}`, counters)
          return followCollection({ api, ...source, reconcileEvery, stats: counters, failures })
        }
        const jobs = ownerSelector(owner)
        return Effect.all([
          follow("jobs", {
            path: `/apis/batch/v1/namespaces/${namespace}/jobs`,
            labelSelector: jobs,
            list: api.listJobs(namespace, jobs),
            onList: (items) => tracker.syncJobs(namespace, items),
            onEvent: (type, job) => tracker.onJobEvent(type, job)
          }),
          follow("pods", {
            path: `/api/v1/namespaces/${namespace}/pods`,
            labelSelector: REINS_SELECTOR,
            list: api.listPods(namespace, REINS_SELECTOR),
            onList: (pods) => tracker.syncPods(namespace, pods),
            onEvent: (type, pod) => tracker.onPodEvent(type, pod)
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

    const { startFollowing } = makeFollower({ api, tracker, owner: ownerLabel, leaveJobs: options.onScopeClose === "leave", launcherScope, handles, failures })
    const adoption = makeAdoption({
      api,
      tracker,
      dataDir: options.dataDir,
      owner,
      namespaces: options.namespaces ?? ["default"],
      handles,
      watchNamespace,
      startFollowing,
      failures
    })

    const launch = (spec: AttemptSpec): Effect.Effect<AttemptHandle, LaunchError, Scope.Scope> =>
      Effect.gen(function*() {
        if (refusal !== null) {
          yield* failures.warn("config", `cannot launch attempt ${spec.attemptId}: ${refusal}`)
          return yield* new LaunchConfigError({ message: refusal })
        }
        const k = yield* requireKubernetes(spec.harness)
        const name = jobName(spec.attemptId)
        const existing = handles.get(name)
        if (existing !== undefined) return existing // launched twice in this process: one Job, one follower
        const files = yield* prepareAttemptFiles(options.dataDir, spec.attemptId, spec.task, spec.taskExtra)
        const template = yield* templateFor(k)
        const giveUpAt = Date.now() + (spec.harness.timeout_s + spec.harness.grace_s + k.stuck_slack_s) * 1000
        const job: V1Job = yield* buildJob(template, {
          params: templateParams(spec, spec.harness, k, name),
          owner,
          env: { ...spec.harness.env, ...attemptVariables({ identity: spec, task: spec.task, endpoints: spec.endpoints, taskFile: TASK_FILE_IN_POD }) },
          taskJson: taskInputJson(spec.task),
          maxLogBytes: spec.harness.max_log_bytes,
          container: k.container,
          serviceAccount: k.service_account,
          giveUpAt
        })
        yield* watchNamespace(k.namespace)
        tracker.track(k.namespace, name)
        const created = yield* createJob({ api, bucket, failures }, k.namespace, job, spec.attemptId).pipe(
          Effect.tapError(() => Effect.sync(() => tracker.untrack(name)))
        )
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

    return {
      kind: "kubernetes" as const,
      dataDir: options.dataDir,
      owner,
      leavesJobsRunning: options.onScopeClose === "leave",
      launch,
      adopt: refusal === null ? adoption.adopt : Effect.succeed([]),
      takeOver: (attempts) => (refusal === null ? adoption.takeOver(attempts) : Effect.succeed([])),
      stats,
      following: () => tracker.size
    }
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
