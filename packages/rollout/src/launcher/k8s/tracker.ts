/**
 * What the launcher currently knows about the Jobs it follows (and their pods), fed by the
 * watches and the periodic relists, and read by one follower fiber per attempt, which waits
 * until its Job's observation classifies as ended.
 *
 * Only Jobs that are tracked (launched or adopted by this launcher) are kept; events about
 * others are ignored. A Job missing from a full list is confirmed missing with a GET before it
 * counts as gone: a list taken just before a create must not make a fresh Job look deleted.
 */
import type { V1Job, V1Pod } from "@kubernetes/client-node"
import { Deferred, Effect, Exit, FiberId, Option } from "effect"
import type { KubeApi } from "./api.js"
import type { JobObservation } from "./classify.js"
import { sortPods } from "./classify.js"
import type { WatchEventType } from "./watch.js"

interface Entry {
  readonly namespace: string
  job: V1Job | null
  jobGone: boolean
  readonly pods: Map<string, V1Pod>
  waiters: Array<Deferred.Deferred<void>>
}

/** The Job a pod belongs to: the labels the Job controller sets, else the owner reference. */
export const jobOfPod = (pod: V1Pod): string | undefined =>
  pod.metadata?.labels?.["batch.kubernetes.io/job-name"] ??
    pod.metadata?.labels?.["job-name"] ??
    pod.metadata?.ownerReferences?.find((o) => o.kind === "Job")?.name

const ended = (o: V1Job | V1Pod) =>
  "status" in o && o.status !== undefined && (
    (o as V1Job).status?.conditions?.some((c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True") === true ||
    (o as V1Pod).status?.phase === "Succeeded" || (o as V1Pod).status?.phase === "Failed"
  )

/**
 * Whether `next` may replace `current`. The watch, a relist and a create response can deliver
 * states out of order (a list taken before an event can return after it); an older state must
 * not hide a newer one, above all an ended Job behind a running one. resourceVersions are
 * compared as numbers when both are (they are etcd revisions in practice); otherwise the only
 * rule kept is that an ended object never goes back to running.
 */
export const supersedes = (next: V1Job | V1Pod, current: V1Job | V1Pod | null): boolean => {
  if (current === null) return true
  const a = Number(current.metadata?.resourceVersion), b = Number(next.metadata?.resourceVersion)
  if (Number.isSafeInteger(a) && Number.isSafeInteger(b)) return b >= a
  return !(ended(current) && !ended(next))
}

export class JobTracker {
  private readonly entries = new Map<string, Entry>()

  constructor(private readonly api: KubeApi) {}

  /** Starts keeping state for a Job (idempotent). */
  track(namespace: string, name: string, job: V1Job | null = null): void {
    if (!this.entries.has(name)) this.entries.set(name, { namespace, job: null, jobGone: false, pods: new Map(), waiters: [] })
    if (job !== null) this.setJob(name, job)
  }

  untrack(name: string): void {
    const e = this.entries.get(name)
    this.entries.delete(name)
    e?.waiters.forEach((w) => Deferred.unsafeDone(w, Exit.void))
  }

  get size(): number {
    return this.entries.size
  }

  observe(name: string): JobObservation {
    const e = this.entries.get(name)
    return e === undefined
      ? { job: null, jobGone: true, pods: [] }
      : { job: e.job, jobGone: e.jobGone, pods: sortPods(e.pods.values()) }
  }

  /** Merges a fresh list of a Job's pods (used right before the verdict is final). Pods gone since keep their last state. */
  setPods(name: string, pods: ReadonlyArray<V1Pod>): void {
    const e = this.entries.get(name)
    if (e !== undefined) pods.forEach((pod) => this.putPod(e, pod))
  }

  /** Waits until `pick` returns a value for the Job's observation. */
  waitFor<A>(name: string, pick: (o: JobObservation) => Option.Option<A>): Effect.Effect<A> {
    const loop: Effect.Effect<A> = Effect.suspend(() => {
      const found = pick(this.observe(name))
      if (Option.isSome(found)) return Effect.succeed(found.value)
      const e = this.entries.get(name)
      if (e === undefined) return Effect.never // untracked: whoever untracked it decides the outcome
      const w = Deferred.unsafeMake<void>(FiberId.none)
      e.waiters.push(w)
      return Effect.zipRight(Deferred.await(w), loop)
    })
    return loop
  }

  onJobEvent(type: WatchEventType, job: V1Job): Effect.Effect<void> {
    return Effect.sync(() => {
      const name = job.metadata?.name
      if (name === undefined || !this.entries.has(name)) return
      if (type === "DELETED") this.markGone(name, job)
      else this.setJob(name, job)
    })
  }

  onPodEvent(_type: WatchEventType, pod: V1Pod): Effect.Effect<void> {
    // Whatever the event (DELETED too), a pod keeps its last state: it still tells how the attempt ended.
    return Effect.sync(() => {
      const e = this.entryOfPod(pod)
      if (e !== undefined) this.putPod(e, pod)
    })
  }

  /** A full list of one namespace's Jobs: update what is there, confirm what is missing. */
  syncJobs(namespace: string, jobs: ReadonlyArray<V1Job>): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      const present = new Set<string>()
      for (const job of jobs) {
        const name = job.metadata?.name
        if (name === undefined) continue
        present.add(name)
        if (this.entries.has(name)) this.setJob(name, job)
      }
      // Only Jobs known to exist (created or adopted) can go missing: a list taken while a
      // create is still being retried must not make the Job look deleted before it exists.
      const missing = [...this.entries].filter(([name, e]) => e.namespace === namespace && e.job !== null && !present.has(name) && !e.jobGone)
      for (const [name] of missing) {
        const current = yield* Effect.either(this.api.readJob(namespace, name))
        if (current._tag === "Left") continue // unknown: the next reconcile will tell
        if (Option.isSome(current.right)) this.setJob(name, current.right.value)
        else this.markGone(name, null)
      }
    })
  }

  syncPods(namespace: string, pods: ReadonlyArray<V1Pod>): Effect.Effect<void> {
    return Effect.sync(() => {
      for (const pod of pods) {
        const e = this.entryOfPod(pod)
        if (e !== undefined && e.namespace === namespace) this.putPod(e, pod)
      }
    })
  }

  private entryOfPod(pod: V1Pod): Entry | undefined {
    const job = jobOfPod(pod)
    return job === undefined ? undefined : this.entries.get(job)
  }

  /** Stores the pod's state unless it is older than the one kept (see `supersedes`). */
  private putPod(e: Entry, pod: V1Pod): void {
    const podName = pod.metadata?.name
    if (!podName || !supersedes(pod, e.pods.get(podName) ?? null)) return
    e.pods.set(podName, pod)
    this.notify(e)
  }

  private setJob(name: string, job: V1Job): void {
    const e = this.entries.get(name)
    if (e === undefined || !supersedes(job, e.job)) return
    e.job = job
    this.notify(e)
  }

  private markGone(name: string, last: V1Job | null): void {
    const e = this.entries.get(name)
    if (e === undefined) return
    if (last !== null) e.job = last
    e.jobGone = true
    this.notify(e)
  }

  private notify(e: Entry): void {
    const waiters = e.waiters
    e.waiters = []
    waiters.forEach((w) => Deferred.unsafeDone(w, Exit.void))
  }
}
