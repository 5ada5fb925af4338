/**
 * A Kubernetes API-server double for the Job launcher tests: a real HTTP server on 127.0.0.1
 * speaking the real REST paths and JSON shapes, so the launcher runs through the real
 * @kubernetes/client-node code (request building, serialization, Watch, ApiException).
 *
 * Implemented:
 * - batch/v1 Jobs: POST (create, 201), GET (one / list with labelSelector), PATCH (JSON patch,
 *   `application/json-patch+json`, with `test` ops: 422 when one fails; merge patch), DELETE (with
 *   propagationPolicy in the query or a DeleteOptions body; pods are garbage-collected right
 *   after unless Orphan), `?watch=true` streams of newline-delimited watch events (ADDED /
 *   MODIFIED / DELETED) from a resourceVersion, with replay of retained history — an object whose
 *   labels change to leave a watch's selector is DELETED for that watch, one that enters it
 *   ADDED, as the real API server's watch cache does —, `ERROR` 410
 *   for compacted versions (or on demand: `expireNextWatch`), and the server closing watches (`closeWatches()`, `watchTimeoutMs`
 *   or `timeoutSeconds`).
 * - v1 Pods: list / watch by labelSelector, `/pods/{name}/log` (text/plain, `container`,
 *   `limitBytes`).
 * - The Job controller's part, scripted per Job: a pod is created with the template's labels
 *   plus `job-name` / `batch.kubernetes.io/job-name` and an owner reference; it then completes,
 *   fails with an exit code, is evicted, is OOM-killed, sticks on ErrImagePull/ImagePullBackOff,
 *   or hangs; `activeDeadlineSeconds` fails the Job with DeadlineExceeded. Job status uses the
 *   real conditions (SuccessCriteriaMet + Complete, FailureTarget + Failed with reason).
 * - Create-time validation a real server would do for the fields the launcher sets (name
 *   syntax, containers with images, restartPolicy, label values) → 422 Invalid with causes;
 *   existing name → 409 AlreadyExists; injected faults (`failNext`: 429 with Retry-After, 5xx,
 *   409, 422, ...) in the real Status shape.
 *
 * Not covered (a real cluster is needed for these): authentication and RBAC (the bearer token
 * is recorded, not checked), admission webhooks and policies, real scheduling, nodes, images and
 * containers (nothing runs; the downward-API task file is not materialized), resource quotas,
 * ttlSecondsAfterFinished garbage collection, server-side apply, field/label selector sets other
 * than =, ==, !=, exists, !exists, in, notin, API priority and fairness, protobuf, HTTP/2,
 * bookmarks, pagination (`limit`/`continue`), and resourceVersion semantics beyond one global
 * counter.
 */
import { KubeConfig } from "@kubernetes/client-node"
import { randomBytes, randomUUID } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export type Script =
  /** `gate`: the Job completes `afterMs` after the gate resolves (tests that need a Job to outlive something). */
  | { readonly kind: "complete"; readonly afterMs?: number; readonly log?: string; readonly gate?: Promise<unknown> }
  | { readonly kind: "fail"; readonly afterMs?: number; readonly exitCode: number; readonly log?: string }
  | { readonly kind: "deadline"; readonly afterMs?: number }
  | { readonly kind: "evict"; readonly afterMs?: number }
  | { readonly kind: "oom"; readonly afterMs?: number }
  | { readonly kind: "imagePull"; readonly afterMs?: number }
  | { readonly kind: "hang"; readonly log?: string }

type Obj = Record<string, any>
type Kind = "jobs" | "pods"

interface FaultRule {
  readonly method: string
  readonly path: RegExp
  readonly status: number
  readonly reason?: string
  readonly message?: string
  readonly retryAfterS?: number
  times: number
}

interface Watcher {
  readonly kind: Kind
  readonly namespace: string
  readonly selector: string
  readonly res: ServerResponse
}

export interface RequestRecord {
  readonly method: string
  readonly path: string
  readonly query: Readonly<Record<string, string>>
  readonly at: number
  readonly authorization: string | undefined
}

const now = () => new Date().toISOString()
const clone = <A>(a: A): A => structuredClone(a)

// --- label selectors ----------------------------------------------------------------------------

const splitTop = (s: string) => {
  const out: Array<string> = []
  let depth = 0, cur = ""
  for (const ch of s) {
    if (ch === "(") depth++
    if (ch === ")") depth--
    if (ch === "," && depth === 0) {
      out.push(cur)
      cur = ""
    } else cur += ch
  }
  if (cur.trim() !== "") out.push(cur)
  return out.map((r) => r.trim()).filter((r) => r !== "")
}

export const matchesSelector = (labels: Readonly<Record<string, string>> | undefined, selector: string): boolean =>
  splitTop(selector).every((req) => {
    const l = labels ?? {}
    let m: RegExpExecArray | null
    if ((m = /^(\S+)\s+(in|notin)\s+\((.*)\)$/.exec(req))) {
      const set = m[3]!.split(",").map((v) => v.trim())
      return m[2] === "in" ? set.includes(l[m[1]!] ?? "\0") : !set.includes(l[m[1]!] ?? "\0")
    }
    if ((m = /^([^!=\s]+)\s*!=\s*(.*)$/.exec(req))) return l[m[1]!] !== m[2]
    if ((m = /^([^!=\s]+)\s*==?\s*(.*)$/.exec(req))) return l[m[1]!] === m[2]
    if ((m = /^!(\S+)$/.exec(req))) return !(m[1]! in l)
    return req in l
  })

// --- the double ---------------------------------------------------------------------------------

export interface K8sDoubleOptions {
  /** The server closes every watch after this long (real servers do so every few minutes). */
  readonly watchTimeoutMs?: number
  /** Watch history kept for replay; older resourceVersions get 410 Gone. */
  readonly historySize?: number
}

export class K8sDouble {
  url = ""
  /** How each new Job runs. Default: completes after 20 ms. */
  scriptFor: (job: Obj) => Script = () => ({ kind: "complete", afterMs: 20 })
  readonly requests: Array<RequestRecord> = []
  /** Successful creates, in order: name and time. */
  readonly creates: Array<{ readonly name: string; readonly at: number }> = []
  readonly deletes: Array<{ readonly name: string; readonly propagationPolicy: string | undefined }> = []

  private rv = 1
  private readonly store: Record<Kind, Map<string, Obj>> = { jobs: new Map(), pods: new Map() }
  private readonly history: Array<{ rv: number; kind: Kind; type: string; object: Obj; previous: Obj | undefined }> = []
  private readonly watchers = new Set<Watcher>()
  private readonly timers = new Set<NodeJS.Timeout>()
  private readonly jobTimers = new Map<string, Array<NodeJS.Timeout>>()
  private readonly logs = new Map<string, string>()
  private readonly faults: Array<FaultRule> = []
  private readonly expire: Record<Kind, number> = { jobs: 0, pods: 0 }
  private readonly server = createServer((req, res) => void this.handle(req, res))

  constructor(private readonly options: K8sDoubleOptions = {}) {}

  static async start(options: K8sDoubleOptions = {}): Promise<K8sDouble> {
    const d = new K8sDouble(options)
    await new Promise<void>((resolve) => d.server.listen(0, "127.0.0.1", resolve))
    d.url = `http://127.0.0.1:${(d.server.address() as AddressInfo).port}`
    return d
  }

  /** A KubeConfig pointing at the double (plain HTTP, so TLS verification is skipped). */
  kubeConfig(): KubeConfig {
    const kc = new KubeConfig()
    kc.loadFromOptions({
      clusters: [{ name: "double", server: this.url, skipTLSVerify: true }],
      users: [{ name: "tester", token: "test-token" }],
      contexts: [{ name: "double", cluster: "double", user: "tester" }],
      currentContext: "double"
    })
    return kc
  }

  jobs(namespace = "default"): Array<Obj> {
    return [...this.store.jobs.values()].filter((j) => j.metadata.namespace === namespace).map(clone)
  }

  pods(namespace = "default"): Array<Obj> {
    return [...this.store.pods.values()].filter((p) => p.metadata.namespace === namespace).map(clone)
  }

  watchRequests(kind: Kind): Array<RequestRecord> {
    return this.requests.filter((r) => r.method === "GET" && r.path.endsWith(`/${kind}`) && (r.query.watch === "true" || r.query.watch === "1"))
  }

  /** The next `times` requests matching method and path get `status` (429 with Retry-After, 500, 403, 409, 422, ...). */
  failNext(rule: { method: string; path: RegExp; status: number; reason?: string; message?: string; retryAfterS?: number; times?: number }): void {
    this.faults.push({ ...rule, times: rule.times ?? 1 })
  }

  /** Watches open now (of one kind). */
  openWatches(kind: Kind): number {
    return [...this.watchers].filter((w) => w.kind === kind).length
  }

  /** The server ends every open watch (as real API servers do periodically). */
  closeWatches(): number {
    const n = this.watchers.size
    for (const w of this.watchers) w.res.end()
    this.watchers.clear()
    return n
  }

  /** The next watch request(s) of `kind` get `ERROR 410 Expired`, as after an etcd compaction. */
  expireNextWatch(kind: Kind, times = 1): void {
    this.expire[kind] += times
  }

  /** Simulates someone deleting a Job outside reins (kubectl delete). */
  deleteJobOutOfBand(namespace: string, name: string): void {
    this.removeJob(`${namespace}/${name}`, "Background")
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t)
    this.timers.clear()
    for (const w of this.watchers) w.res.destroy()
    this.watchers.clear()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  // --- HTTP ---------------------------------------------------------------------------------

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", this.url)
    const query = Object.fromEntries(url.searchParams)
    this.requests.push({ method: req.method ?? "GET", path: url.pathname, query, at: Date.now(), authorization: req.headers.authorization })
    const body = await readBody(req)
    const fault = this.faults.find((f) => f.times > 0 && f.method === req.method && f.path.test(url.pathname))
    if (fault !== undefined) {
      fault.times--
      const headers: Record<string, string> = fault.retryAfterS === undefined ? {} : { "retry-after": String(fault.retryAfterS) }
      return this.status(res, fault.status, fault.reason ?? defaultReason(fault.status), fault.message ?? `injected ${fault.status}`, undefined, headers)
    }
    let m: RegExpExecArray | null
    if ((m = /^\/apis\/batch\/v1\/namespaces\/([^/]+)\/jobs$/.exec(url.pathname))) {
      if (req.method === "POST") return this.createJob(res, m[1]!, body)
      if (req.method === "GET") return this.listOrWatch(res, "jobs", m[1]!, query)
    }
    if ((m = /^\/apis\/batch\/v1\/namespaces\/([^/]+)\/jobs\/([^/]+)$/.exec(url.pathname))) {
      const key = `${m[1]}/${m[2]}`
      const job = this.store.jobs.get(key)
      if (job === undefined) return this.status(res, 404, "NotFound", `jobs.batch "${m[2]}" not found`, { name: m[2], group: "batch", kind: "jobs" })
      if (req.method === "GET") return json(res, 200, { apiVersion: "batch/v1", kind: "Job", ...job })
      if (req.method === "PATCH") return this.patchJob(res, job, req.headers["content-type"] ?? "", body)
      if (req.method === "DELETE") {
        const policy = query.propagationPolicy ?? (safeParse(body) as Obj | undefined)?.propagationPolicy
        this.deletes.push({ name: m[2]!, propagationPolicy: policy })
        this.removeJob(key, policy)
        return json(res, 200, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", details: { name: m[2], group: "batch", kind: "jobs", uid: job.metadata.uid } })
      }
    }
    if ((m = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/.exec(url.pathname)) && req.method === "GET") {
      return this.listOrWatch(res, "pods", m[1]!, query)
    }
    if ((m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/log$/.exec(url.pathname)) && req.method === "GET") {
      const pod = this.store.pods.get(`${m[1]}/${m[2]}`)
      if (pod === undefined) return this.status(res, 404, "NotFound", `pods "${m[2]}" not found`, { name: m[2], kind: "pods" })
      const container = query.container ?? pod.spec.containers[0].name
      if (!pod.spec.containers.some((c: Obj) => c.name === container)) {
        return this.status(res, 400, "BadRequest", `container ${container} is not valid for pod ${m[2]}`)
      }
      let text = Buffer.from(this.logs.get(`${m[1]}/${m[2]}`) ?? "")
      if (query.limitBytes !== undefined) text = text.subarray(0, Number(query.limitBytes))
      res.writeHead(200, { "content-type": "text/plain" })
      return void res.end(text)
    }
    return this.status(res, 404, "NotFound", `the server could not find the requested resource (${req.method} ${url.pathname})`)
  }

  private status(res: ServerResponse, code: number, reason: string, message: string, details?: Obj, headers: Record<string, string> = {}) {
    json(res, code, { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, ...(details ? { details } : {}), code }, headers)
  }

  private listOrWatch(res: ServerResponse, kind: Kind, namespace: string, query: Record<string, string>) {
    const selector = query.labelSelector ?? ""
    const matching = () =>
      [...this.store[kind].values()].filter((o) => o.metadata.namespace === namespace && matchesSelector(o.metadata.labels, selector))
    if (query.watch !== "true" && query.watch !== "1") {
      const list = kind === "jobs" ? { apiVersion: "batch/v1", kind: "JobList" } : { apiVersion: "v1", kind: "PodList" }
      return json(res, 200, { ...list, metadata: { resourceVersion: String(this.rv) }, items: matching() })
    }
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" })
    res.flushHeaders() // like a real API server: the client sees the watch start before any event
    const w: Watcher = { kind, namespace, selector, res }
    const from = query.resourceVersion === undefined || query.resourceVersion === "" || query.resourceVersion === "0" ? null : Number(query.resourceVersion)
    if (from === null) {
      for (const o of matching()) res.write(JSON.stringify({ type: "ADDED", object: o }) + "\n")
    } else {
      const oldest = this.history[0]?.rv ?? this.rv
      if (from < oldest - 1 || this.expire[kind] > 0) {
        this.expire[kind] = Math.max(0, this.expire[kind] - 1)
        res.write(JSON.stringify({ type: "ERROR", object: { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message: `too old resource version: ${from} (${oldest})`, reason: "Expired", code: 410 } }) + "\n")
        return void res.end()
      }
      for (const e of this.history) {
        const seen = e.rv > from ? this.seenAs(w, kind, e.type, e.object, e.previous) : null
        if (seen !== null) res.write(JSON.stringify({ type: seen, object: e.object }) + "\n")
      }
    }
    this.watchers.add(w)
    res.on("close", () => this.watchers.delete(w))
    const timeoutMs = query.timeoutSeconds !== undefined ? Number(query.timeoutSeconds) * 1000 : this.options.watchTimeoutMs
    if (timeoutMs !== undefined) this.later(timeoutMs, () => {
      this.watchers.delete(w)
      res.end()
    })
  }

  private matches(w: Watcher, o: Obj) {
    return o.metadata.namespace === w.namespace && matchesSelector(o.metadata.labels, w.selector)
  }

  // --- objects and events -------------------------------------------------------------------

  private emit(kind: Kind, type: "ADDED" | "MODIFIED" | "DELETED", obj: Obj) {
    obj.metadata.resourceVersion = String(++this.rv)
    const key = `${obj.metadata.namespace}/${obj.metadata.name}`
    const previous = this.store[kind].get(key)
    if (type === "DELETED") this.store[kind].delete(key)
    else this.store[kind].set(key, obj)
    const object = clone(obj)
    this.history.push({ rv: this.rv, kind, type, object, previous: previous === undefined ? undefined : clone(previous) })
    if (this.history.length > (this.options.historySize ?? 10_000)) this.history.shift()
    for (const w of this.watchers) {
      const seen = this.seenAs(w, kind, type, object, previous)
      if (seen !== null) w.res.write(JSON.stringify({ type: seen, object }) + "\n")
    }
  }

  /** How a watch sees an event: label changes move objects in and out of its selector. */
  private seenAs(w: Watcher, kind: Kind, type: string, object: Obj, previous: Obj | undefined): string | null {
    if (w.kind !== kind) return null
    const now = this.matches(w, object)
    if (type !== "MODIFIED") return now ? type : null
    const before = previous !== undefined && this.matches(w, previous)
    return now && before ? "MODIFIED" : now ? "ADDED" : before ? "DELETED" : null
  }

  private patchJob(res: ServerResponse, job: Obj, contentType: string, raw: string) {
    const patch = safeParse(raw)
    const next = clone(job)
    if (contentType.startsWith("application/json-patch+json")) {
      if (!Array.isArray(patch)) return this.status(res, 400, "BadRequest", "a JSON patch must be an array of operations")
      for (const op of patch as Array<Obj>) {
        const failed = applyPatchOp(next, op)
        if (failed !== null) return this.status(res, 422, "Invalid", `the server rejected our request due to an error in our request: ${failed}`)
      }
    } else if (contentType.startsWith("application/merge-patch+json")) {
      mergePatch(next, patch as Obj)
    } else {
      return this.status(res, 415, "UnsupportedMediaType", `the body of the request was in an unknown format: ${contentType}`)
    }
    this.emit("jobs", "MODIFIED", next)
    return json(res, 200, next)
  }

  private later(ms: number, f: () => void, jobKey?: string) {
    const t = setTimeout(() => {
      this.timers.delete(t)
      f()
    }, ms)
    this.timers.add(t)
    if (jobKey !== undefined) this.jobTimers.set(jobKey, [...(this.jobTimers.get(jobKey) ?? []), t])
  }

  private createJob(res: ServerResponse, namespace: string, raw: string) {
    const job = safeParse(raw) as Obj | undefined
    if (job === undefined) return this.status(res, 400, "BadRequest", "the request body is not valid JSON")
    const name: string | undefined = job.metadata?.name
    const causes = validateJob(job)
    if (causes.length > 0) {
      return this.status(res, 422, "Invalid", `Job.batch "${name ?? ""}" is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(", ")}`, {
        name,
        group: "batch",
        kind: "Job",
        causes: causes.map((c) => ({ reason: "FieldValueInvalid", ...c }))
      })
    }
    const key = `${namespace}/${name}`
    if (this.store.jobs.has(key)) {
      return this.status(res, 409, "AlreadyExists", `jobs.batch "${name}" already exists`, { name, group: "batch", kind: "jobs" })
    }
    const uid = randomUUID()
    const controllerLabels = { "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name!, "controller-uid": uid, "job-name": name! }
    const stored: Obj = {
      ...job,
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { ...job.metadata, namespace, uid, generation: 1, creationTimestamp: now() },
      spec: {
        completions: 1,
        parallelism: 1,
        completionMode: "NonIndexed",
        suspend: false,
        ...job.spec,
        selector: { matchLabels: { "batch.kubernetes.io/controller-uid": uid } },
        template: { ...job.spec.template, metadata: { ...job.spec.template.metadata, labels: { ...job.spec.template.metadata?.labels, ...controllerLabels } } }
      },
      status: {}
    }
    this.emit("jobs", "ADDED", stored)
    this.creates.push({ name: name!, at: Date.now() })
    json(res, 201, stored)
    this.run(key, this.scriptFor(clone(stored)))
  }

  /** The Job controller + kubelet: one pod, driven by the script. */
  private run(jobKey: string, script: Script) {
    const job = () => this.store.jobs.get(jobKey)
    const j = job()!
    const podName = `${j.metadata.name}-${randomBytes(3).toString("hex").slice(0, 5)}`
    const podKey = `${j.metadata.namespace}/${podName}`
    const containers: Array<Obj> = j.spec.template.spec.containers
    const pod = (): Obj | undefined => this.store.pods.get(podKey)
    const statuses = (state: Obj, ready = false) =>
      containers.map((c) => ({ name: c.name, image: c.image, imageID: "", ready, restartCount: 0, started: ready, state }))
    const updatePod = (patch: (p: Obj) => void) => {
      const p = pod()
      if (p === undefined) return
      const next = clone(p)
      patch(next)
      this.emit("pods", "MODIFIED", next)
    }
    const updateJob = (patch: (j: Obj) => void) => {
      const cur = job()
      if (cur === undefined) return
      const next = clone(cur)
      patch(next)
      this.emit("jobs", "MODIFIED", next)
    }
    const finishJob = (ok: boolean, reason: string, message: string) =>
      updateJob((jj) => {
        const t = now()
        jj.status = {
          ...jj.status,
          active: 0,
          ready: 0,
          terminating: 0,
          [ok ? "succeeded" : "failed"]: 1,
          ...(ok ? { completionTime: t } : {}),
          conditions: ok
            ? [
              { type: "SuccessCriteriaMet", status: "True", reason: "CompletionsReached", message: "Reached expected number of succeeded pods", lastProbeTime: t, lastTransitionTime: t },
              { type: "Complete", status: "True", reason: "CompletionsReached", message: "Reached expected number of succeeded pods", lastProbeTime: t, lastTransitionTime: t }
            ]
            : [
              { type: "FailureTarget", status: "True", reason, message, lastProbeTime: t, lastTransitionTime: t },
              { type: "Failed", status: "True", reason, message, lastProbeTime: t, lastTransitionTime: t }
            ]
        }
      })
    const terminated = (exitCode: number, reason: string) => ({ terminated: { exitCode, reason, startedAt: now(), finishedAt: now(), containerID: `containerd://${randomBytes(8).toString("hex")}` } })
    const stopPod = (exitCode: number, reason: string, phase: "Succeeded" | "Failed", extra: (p: Obj) => void = () => {}) =>
      updatePod((p) => {
        p.status.phase = phase
        p.status.containerStatuses = statuses(terminated(exitCode, reason))
        extra(p)
      })
    let ended = false
    const end = (f: () => void) => {
      if (ended || job() === undefined) return
      ended = true
      f()
    }

    this.logs.set(podKey, "log" in script && script.log !== undefined ? script.log : `hello from ${podName}\n`)
    this.later(2, () => {
      if (job() === undefined) return
      this.emit("pods", "ADDED", {
        apiVersion: "v1",
        kind: "Pod",
        metadata: {
          name: podName,
          namespace: j.metadata.namespace,
          uid: randomUUID(),
          creationTimestamp: now(),
          labels: clone(j.spec.template.metadata.labels),
          annotations: clone(j.spec.template.metadata.annotations ?? {}),
          ownerReferences: [{ apiVersion: "batch/v1", kind: "Job", name: j.metadata.name, uid: j.metadata.uid, controller: true, blockOwnerDeletion: true }]
        },
        spec: clone(j.spec.template.spec),
        status: { phase: "Pending", conditions: [{ type: "PodScheduled", status: "True", lastTransitionTime: now() }], qosClass: "BestEffort" }
      })
      updateJob((jj) => (jj.status = { ...jj.status, active: 1, ready: 0, terminating: 0, startTime: now(), uncountedTerminatedPods: {} }))
      if (script.kind === "imagePull") {
        const image = containers[0]!.image
        updatePod((p) => (p.status.containerStatuses = statuses({ waiting: { reason: "ErrImagePull", message: `failed to pull and unpack image "${image}": not found` } })))
        this.later(script.afterMs ?? 10, () => updatePod((p) => (p.status.containerStatuses = statuses({ waiting: { reason: "ImagePullBackOff", message: `Back-off pulling image "${image}"` } }))), jobKey)
      } else {
        updatePod((p) => {
          p.status.phase = "Running"
          p.status.startTime = now()
          p.status.containerStatuses = statuses({ running: { startedAt: now() } }, true)
        })
      }
    }, jobKey)

    const deadline = () =>
      end(() => {
        // The Job controller kills the pod and fails the Job.
        stopPod(137, "Error", "Failed")
        const p = pod()
        if (p !== undefined) this.emit("pods", "DELETED", { ...clone(p), metadata: { ...p.metadata, deletionTimestamp: now() } })
        finishJob(false, "DeadlineExceeded", "Job was active longer than specified deadline")
      })
    const after = "afterMs" in script ? script.afterMs ?? 20 : 20
    switch (script.kind) {
      case "complete": {
        const complete = () =>
          this.later(after, () => end(() => {
            stopPod(0, "Completed", "Succeeded")
            finishJob(true, "", "")
          }), jobKey)
        if (script.gate === undefined) complete()
        else void script.gate.then(() => (job() === undefined ? undefined : complete()))
        break
      }
      case "fail":
        this.later(after, () => end(() => {
          stopPod(script.exitCode, "Error", "Failed")
          finishJob(false, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        }), jobKey)
        break
      case "oom":
        this.later(after, () => end(() => {
          stopPod(137, "OOMKilled", "Failed")
          finishJob(false, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        }), jobKey)
        break
      case "evict":
        this.later(after, () => end(() => {
          updatePod((p) => {
            p.status.phase = "Failed"
            p.status.reason = "Evicted"
            p.status.message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi."
            p.status.conditions = [...(p.status.conditions ?? []), { type: "DisruptionTarget", status: "True", reason: "TerminationByKubelet", message: "The node was low on resource: memory.", lastTransitionTime: now() }]
            p.status.containerStatuses = statuses(terminated(137, "Error"))
          })
          finishJob(false, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        }), jobKey)
        break
      case "deadline":
        this.later(after, deadline, jobKey)
        break
      case "imagePull":
      case "hang":
        break
    }
    const activeDeadline = j.spec.activeDeadlineSeconds
    if (typeof activeDeadline === "number") this.later(activeDeadline * 1000, deadline, jobKey)
  }

  private removeJob(key: string, policy: string | undefined) {
    const j = this.store.jobs.get(key)
    if (j === undefined) return
    for (const t of this.jobTimers.get(key) ?? []) {
      clearTimeout(t)
      this.timers.delete(t)
    }
    this.jobTimers.delete(key)
    this.emit("jobs", "DELETED", { ...clone(j), metadata: { ...j.metadata, deletionTimestamp: now() } })
    if (policy === "Orphan") return
    // Background: the garbage collector removes the pods shortly after.
    this.later(5, () => {
      for (const [podKey, p] of this.store.pods) {
        if (p.metadata.ownerReferences?.some((o: Obj) => o.uid === j.metadata.uid)) {
          this.emit("pods", "DELETED", { ...clone(p), metadata: { ...p.metadata, deletionTimestamp: now() } })
          this.logs.delete(podKey)
        }
      }
    })
  }
}

const defaultReason = (status: number) =>
  ({ 400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "AlreadyExists", 410: "Expired", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout" } as Record<number, string>)[status] ??
    "Unknown"

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

/** The subset of Job validation the launcher's fields can trip. */
const validateJob = (job: Obj): Array<{ field: string; message: string }> => {
  const causes: Array<{ field: string; message: string }> = []
  const name = job.metadata?.name
  if (typeof name !== "string" || name === "") causes.push({ field: "metadata.name", message: "Required value: name or generateName is required" })
  else if (name.length > 63 || !DNS_LABEL.test(name)) causes.push({ field: "metadata.name", message: `Invalid value: "${name}": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'` })
  for (const [where, labels] of [["metadata.labels", job.metadata?.labels], ["spec.template.metadata.labels", job.spec?.template?.metadata?.labels]] as const) {
    for (const [k, v] of Object.entries((labels ?? {}) as Record<string, string>)) {
      if (typeof v !== "string" || v.length > 63 || !LABEL_VALUE.test(v)) causes.push({ field: `${where}`, message: `Invalid value: "${v}" for label ${k}` })
    }
  }
  const pod = job.spec?.template?.spec
  const containers: Array<Obj> = pod?.containers ?? []
  if (containers.length === 0) causes.push({ field: "spec.template.spec.containers", message: "Required value" })
  containers.forEach((c, i) => {
    if (typeof c.name !== "string" || !DNS_LABEL.test(c.name)) causes.push({ field: `spec.template.spec.containers[${i}].name`, message: "Required value" })
    if (typeof c.image !== "string" || c.image.trim() === "") causes.push({ field: `spec.template.spec.containers[${i}].image`, message: "Required value" })
  })
  if (pod !== undefined && !["Never", "OnFailure"].includes(pod.restartPolicy)) {
    causes.push({ field: "spec.template.spec.restartPolicy", message: `Unsupported value: "${pod.restartPolicy}": supported values: "OnFailure", "Never"` })
  }
  return causes
}

const json = (res: ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(code, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", () => resolve(""))
  })

/** One RFC 6902 operation (add, replace, remove, test) on `doc`; the failure, or null. */
const applyPatchOp = (doc: Obj, op: Obj): string | null => {
  const path = String(op.path ?? "").split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
  if (path.length === 0) return `unsupported path ${op.path}`
  let parent: Obj = doc
  for (const key of path.slice(0, -1)) {
    if (typeof parent[key] !== "object" || parent[key] === null) return `path ${op.path} does not exist`
    parent = parent[key]
  }
  const last = path.at(-1)!
  switch (op.op) {
    case "test":
      return JSON.stringify(parent[last]) === JSON.stringify(op.value) ? null : `test failed: ${op.path} is ${JSON.stringify(parent[last])}, not ${JSON.stringify(op.value)}`
    case "add":
      parent[last] = op.value
      return null
    case "replace":
      if (!(last in parent)) return `replace: ${op.path} does not exist`
      parent[last] = op.value
      return null
    case "remove":
      if (!(last in parent)) return `remove: ${op.path} does not exist`
      delete parent[last]
      return null
    default:
      return `unsupported operation ${op.op}`
  }
}

/** RFC 7386 merge patch. */
const mergePatch = (target: Obj, patch: Obj) => {
  for (const [k, v] of Object.entries(patch ?? {})) {
    if (v === null) delete target[k]
    else if (typeof v === "object" && !Array.isArray(v) && typeof target[k] === "object" && target[k] !== null) mergePatch(target[k], v as Obj)
    else target[k] = v
  }
}

const safeParse = (s: string): unknown => {
  try {
    return s === "" ? undefined : JSON.parse(s)
  } catch {
    return undefined
  }
}
