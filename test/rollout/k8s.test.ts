/**
 * The Kubernetes Job launcher against the API-server double (k8sDouble.ts): the real
 * @kubernetes/client-node over real HTTP. Create → watch → completion → logs, the Job's shape,
 * outcome mapping (exit code, deadline, eviction, OOM, image pull), cancel, adoption after a
 * restart without a duplicate Job, the create rate limit, 409/422/429/5xx handling, and watches
 * re-established after the server closes them.
 */
import { describe, expect, it } from "@effect/vitest"
import { HarnessSpec, KubernetesHarnessSpec, Task } from "@reins/protocol"
import {
  type AttemptSpec,
  decodeHarnessSpec,
  jobName,
  type KubernetesLauncherOptions,
  makeKubernetesLauncher,
  outcomeOfLaunchError,
  readAttemptLogs,
  runAttempt,
  TASK_FILE_IN_POD
} from "@reins/rollout"
import { Effect, Exit, Fiber, Scope, TestClock } from "effect"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"
import { nextId, tempDir, verifier, waitFor } from "./helpers.js"
import { K8sDouble, type K8sDoubleOptions, type Script } from "./k8sDouble.js"

/** A pause on the real clock, for polling where the test clock runs the code under test. */
const realSleep = (ms: number) => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, ms)))

const data = tempDir("k8s")
afterAll(() => data.cleanup())

/** A fresh API-server double for one test, closed with the test's scope. */
const double = (options: K8sDoubleOptions = {}) => Effect.acquireRelease(Effect.promise(() => K8sDouble.start(options)), (d) => Effect.promise(() => d.close()))

const launcherFor = (d: K8sDouble, options: Partial<KubernetesLauncherOptions> = {}) =>
  makeKubernetesLauncher({
    dataDir: data.dir,
    kubeConfig: { _tag: "Instance", kubeConfig: d.kubeConfig() },
    createRate: { perSecond: 1000, burst: 1000 },
    retry: { times: 4, baseMs: 20, maxMs: 200 },
    ...options
  })

const k8sHarness = (fields: Partial<ConstructorParameters<typeof HarnessSpec>[0]> = {}, k: Partial<ConstructorParameters<typeof KubernetesHarnessSpec>[0]> = {}) =>
  new HarnessSpec({
    command: ["python", "-m", "agent"],
    env: { AGENT_MODE: "eval" },
    timeout_s: 120,
    grace_s: 5,
    kubernetes: new KubernetesHarnessSpec({ image: "registry.example/agent:1.2", ttl_s: 600, ...k }),
    ...fields
  })

const spec = (h: HarnessSpec = k8sHarness(), fields: Partial<AttemptSpec> = {}): AttemptSpec => {
  const attemptId = fields.attemptId ?? nextId("k8s")
  return {
    rolloutId: `r-${attemptId}`,
    attemptId,
    attemptKey: `key-${attemptId}`,
    task: new Task({ id: "t-7", input: { repo: "x/y", issue: 7 } }),
    taskExtra: { answer: "hello" },
    harness: h,
    endpoints: { openaiBaseUrl: "http://gateway.reins.svc:8080/v1" },
    ...fields
  }
}

/** Scripts per attempt id (the double asks per Job; the attempt id is in an annotation). */
const scripted = (d: K8sDouble, scripts: Record<string, Script>, fallback: Script = { kind: "complete", afterMs: 20 }) => {
  d.scriptFor = (job) => scripts[job.metadata.annotations["reins.dev/attempt-id"]] ?? fallback
}

describe("Kubernetes Job launcher", () => {
  it.scopedLive("creates a Job per attempt with reins' fields, follows it to completion and captures the pod log", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const s = spec()
      scripted(d, { [s.attemptId]: { kind: "complete", afterMs: 30, log: "solved the issue\n" } })
      const launcher = yield* launcherFor(d)
      const handle = yield* launcher.launch(s)
      const outcome = yield* handle.outcome
      expect(outcome).toMatchObject({ _tag: "Succeeded", exitCode: 0 })
      expect(readFileSync(handle.files.stdout, "utf8")).toBe("solved the issue\n")
      // What the launcher actor's `Logs` serves the dashboard: the pod log, as stdout.
      expect(readAttemptLogs(launcher.dataDir, s.attemptId).map((l) => [l.name, l.text, l.truncated])).toEqual([["stdout", "solved the issue\n", false], ["stderr", "", false]])

      const [job] = d.jobs()
      expect(job.metadata.name).toBe(jobName(s.attemptId))
      expect(job.metadata.labels).toMatchObject({ "reins.dev/rollout": s.rolloutId, "reins.dev/attempt": s.attemptId, "app.kubernetes.io/managed-by": "reins" })
      expect(job.spec).toMatchObject({ backoffLimit: 0, activeDeadlineSeconds: 120, ttlSecondsAfterFinished: 600 })
      const pod = job.spec.template
      expect(pod.metadata.labels).toMatchObject({ "reins.dev/attempt": s.attemptId })
      expect(JSON.parse(pod.metadata.annotations["reins.dev/task"])).toEqual({ repo: "x/y", issue: 7 })
      expect(pod.spec.restartPolicy).toBe("Never")
      expect(pod.spec.terminationGracePeriodSeconds).toBe(5)
      const env = Object.fromEntries(pod.spec.containers[0].env.map((e: { name: string; value: string }) => [e.name, e.value]))
      expect(env).toEqual({
        AGENT_MODE: "eval",
        OPENAI_BASE_URL: "http://gateway.reins.svc:8080/v1",
        OPENAI_API_KEY: s.attemptKey,
        ANTHROPIC_BASE_URL: "http://gateway.reins.svc:8080",
        ANTHROPIC_API_KEY: s.attemptKey,
        REINS_TASK: JSON.stringify({ repo: "x/y", issue: 7 }),
        REINS_TASK_FILE: TASK_FILE_IN_POD,
        REINS_TASK_ID: "t-7",
        REINS_REWARD_URL: "http://gateway.reins.svc:8080/v1/reward",
        REINS_ROLLOUT_ID: s.rolloutId,
        REINS_ATTEMPT_ID: s.attemptId
      })
      expect(pod.spec.containers[0]).toMatchObject({ image: "registry.example/agent:1.2", command: ["python", "-m", "agent"] })
      expect(pod.spec.volumes).toContainEqual({
        name: "reins-task",
        downwardAPI: { items: [{ path: "task.json", fieldRef: { fieldPath: "metadata.annotations['reins.dev/task']" } }] }
      })
      // The client authenticated with the kubeconfig's token on every request.
      expect(d.requests.every((r) => r.authorization === "Bearer test-token")).toBe(true)
      expect(d.creates).toHaveLength(1)
    }))

  it.scopedLive("a YAML template with placeholders: env reaches every container, the named container is the harness", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const template = join(data.dir, "job-template.yaml")
      writeFileSync(
        template,
        [
          "apiVersion: batch/v1",
          "kind: Job",
          "metadata:",
          "  annotations:",
          "    team/owner: \"attempt {{attempt_id}} of {{rollout_id}}\"",
          "spec:",
          "  template:",
          "    spec:",
          "      restartPolicy: OnFailure",
          "      containers:",
          "        - name: proxy",
          "          image: envoyproxy/envoy:v1.31",
          "        - name: agent",
          "          image: \"{{image}}\"",
          "          command: \"{{command}}\"",
          "          env:",
          "            - name: OPENAI_API_KEY",
          "              value: from-the-template",
          ""
        ].join("\n")
      )
      const s = spec(k8sHarness({}, { job_template: template, container: "agent" }))
      scripted(d, { [s.attemptId]: { kind: "fail", exitCode: 4, afterMs: 20, log: "tests failed\n" } })
      const launcher = yield* launcherFor(d)
      const handle = yield* launcher.launch(s)
      const outcome = yield* handle.outcome
      expect(outcome).toMatchObject({ _tag: "Failed", reason: "exit", exitCode: 4 })
      expect(readFileSync(handle.files.stdout, "utf8")).toBe("tests failed\n")
      const [job] = d.jobs()
      expect(job.metadata.annotations["team/owner"]).toBe(`attempt ${s.attemptId} of ${s.rolloutId}`)
      const [proxy, agent] = job.spec.template.spec.containers
      expect(agent).toMatchObject({ name: "agent", image: "registry.example/agent:1.2", command: ["python", "-m", "agent"] })
      for (const c of [proxy, agent]) {
        const env = Object.fromEntries(c.env.map((e: { name: string; value: string }) => [e.name, e.value]))
        expect(env.OPENAI_API_KEY).toBe(s.attemptKey)
        expect(env.REINS_TASK_FILE).toBe(TASK_FILE_IN_POD)
      }
      expect(job.spec.template.spec.restartPolicy).toBe("Never")
    }))

  it.scopedLive("outcome mapping: deadline → failed (timeout); evicted, OOMKilled, image pull → infrastructure (retryable)", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const ids = { deadline: nextId("dl"), evict: nextId("ev"), oom: nextId("oom"), pull: nextId("pull") }
      scripted(d, {
        [ids.deadline]: { kind: "deadline", afterMs: 30 },
        [ids.evict]: { kind: "evict", afterMs: 30 },
        [ids.oom]: { kind: "oom", afterMs: 30 },
        [ids.pull]: { kind: "imagePull", afterMs: 20 }
      })
      const launcher = yield* launcherFor(d)
      const outcomes = yield* Effect.forEach(Object.values(ids), (attemptId) =>
        launcher.launch(spec(k8sHarness(), { attemptId })).pipe(Effect.flatMap((h) => h.outcome)), { concurrency: "unbounded" })
      const [deadline, evict, oom, pull] = outcomes
      expect(deadline).toMatchObject({ _tag: "Failed", reason: "timeout" })
      expect(evict).toMatchObject({ _tag: "InfraFailed", reason: "evicted", retryable: true })
      expect(oom).toMatchObject({ _tag: "InfraFailed", reason: "oom-killed", retryable: true })
      expect(pull).toMatchObject({ _tag: "InfraFailed", reason: "image-pull", retryable: true })
      if (pull!._tag === "InfraFailed") expect(pull.message).toMatch(/ErrImagePull|ImagePullBackOff/)
      // A pod stuck on its image would wait for the deadline: the launcher deleted its Job.
      expect(d.deletes).toContainEqual({ name: jobName(ids.pull), propagationPolicy: "Background" })
    }))

  it.scopedLive("cancel deletes the Job with Background propagation; closing the scope deletes too", () =>
    Effect.gen(function*() {
      const d = yield* double()
      scripted(d, {}, { kind: "hang" })
      const launcher = yield* launcherFor(d)
      const handle = yield* launcher.launch(spec())
      yield* waitFor(() => d.pods().some((p) => p.status.phase === "Running"))
      const outcome = yield* handle.cancel("trainer cancelled the rollout")
      expect(outcome).toMatchObject({ _tag: "Cancelled", reason: "trainer cancelled the rollout" })
      expect(d.deletes).toEqual([{ name: jobName(handle.attemptId), propagationPolicy: "Background" }])
      yield* waitFor(() => d.jobs().length === 0 && d.pods().length === 0)

      const scope = yield* Scope.make()
      const second = yield* launcher.launch(spec()).pipe(Scope.extend(scope))
      yield* waitFor(() => d.jobs().length === 1)
      yield* Scope.close(scope, Exit.void)
      expect((yield* second.outcome)._tag).toBe("Cancelled")
      yield* waitFor(() => d.jobs().length === 0)
    }))

  it.scopedLive("a Job deleted behind reins' back is an infrastructure failure (lost)", () =>
    Effect.gen(function*() {
      const d = yield* double()
      scripted(d, {}, { kind: "hang" })
      const launcher = yield* launcherFor(d)
      const handle = yield* launcher.launch(spec())
      yield* waitFor(() => d.jobs().length === 1)
      d.deleteJobOutOfBand("default", jobName(handle.attemptId))
      expect(yield* handle.outcome).toMatchObject({ _tag: "InfraFailed", reason: "lost", retryable: true })
    }))

  it.scopedLive("after a controller restart, existing Jobs are adopted by label, never created twice", () =>
    Effect.gen(function*() {
      const d = yield* double()
      scripted(d, {}, { kind: "complete", afterMs: 700, log: "finished after the restart\n" })
      const s = spec()
      // First incarnation: launches, then goes away leaving its Job running ("leave").
      const first = yield* Scope.make()
      const old = yield* launcherFor(d, { onScopeClose: "leave", owner: "ctl-a" }).pipe(Scope.extend(first))
      yield* old.launch(s).pipe(Scope.extend(first))
      yield* waitFor(() => d.jobs().length === 1)
      yield* Scope.close(first, Exit.void)
      expect(d.jobs()).toHaveLength(1)
      expect(d.deletes).toHaveLength(0)

      // Second incarnation: adopt finds it and follows it to the end.
      const fresh = yield* launcherFor(d, { owner: "ctl-a" })
      const adopted = yield* fresh.adopt
      expect(adopted).toHaveLength(1)
      const a = adopted[0]!
      expect(a._tag).toBe("Following")
      if (a._tag !== "Following") return
      expect(a.handle).toMatchObject({ attemptId: s.attemptId, rolloutId: s.rolloutId })
      // Launching the same attempt again (a controller that retried its last step) joins the same Job.
      const again = yield* fresh.launch(s)
      expect(again).toBe(a.handle)
      expect(yield* a.handle.outcome).toMatchObject({ _tag: "Succeeded" })
      expect(readFileSync(a.handle.files.stdout, "utf8")).toBe("finished after the restart\n")
      expect(d.creates).toHaveLength(1)

      // A third launcher that skipped adopt: create → 409 AlreadyExists → adopts the existing Job.
      const third = yield* launcherFor(d, { owner: "ctl-a" })
      const joined = yield* third.launch(s)
      expect(yield* joined.outcome).toMatchObject({ _tag: "Succeeded" })
      expect(d.creates).toHaveLength(1)
      expect(d.requests.filter((r) => r.method === "POST")).toHaveLength(2)
      // Another launcher's adopt does not take these Jobs.
      const other = yield* launcherFor(d, { owner: "ctl-b" })
      expect(yield* other.adopt).toHaveLength(0)
    }))

  it.scopedLive("two launchers on one API server own their Jobs: a restart adopts only its own, a stop deletes only its own", () =>
    Effect.gen(function*() {
      const d = yield* double()
      let release = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      scripted(d, {}, { kind: "complete", afterMs: 10, log: "done\n", gate })
      const scopeA = yield* Scope.make()
      const scopeB = yield* Scope.make()
      yield* Effect.addFinalizer(() => Effect.zipRight(Scope.close(scopeA, Exit.void), Scope.close(scopeB, Exit.void)))
      // a is stopped as a kill -9 would (its Jobs stay); b deletes its Jobs when it stops
      const a = yield* launcherFor(d, { owner: "node-a", onScopeClose: "leave" }).pipe(Scope.extend(scopeA))
      const b = yield* launcherFor(d, { owner: "node-b" }).pipe(Scope.extend(scopeB))
      const ofA = [spec(), spec()]
      const ofB = [spec(), spec()]
      yield* Effect.forEach(ofA, (s) => a.launch(s).pipe(Scope.extend(scopeA)))
      const handlesB = yield* Effect.forEach(ofB, (s) => b.launch(s).pipe(Scope.extend(scopeB)))
      yield* waitFor(() => d.pods().filter((p) => p.status.phase === "Running").length === 4)
      const ownerOf = (s: AttemptSpec) => d.jobs().find((j) => j.metadata.name === jobName(s.attemptId))?.metadata.labels["reins.dev/owner"]
      expect([...ofA, ...ofB].map(ownerOf)).toEqual(["node-a", "node-a", "node-b", "node-b"])

      // a goes away; restarted with the same identity it adopts exactly its own Jobs
      yield* Scope.close(scopeA, Exit.void)
      const again = yield* launcherFor(d, { owner: "node-a" })
      const adopted = yield* again.adopt
      expect(adopted.map((x) => (x._tag === "Following" ? x.handle.attemptId : "")).sort()).toEqual(ofA.map((s) => s.attemptId).sort())
      // a launcher with a new identity adopts nothing of the live ones
      expect(yield* (yield* launcherFor(d, { owner: "node-c" })).adopt).toEqual([])

      // b stops: its Jobs are deleted, a's are untouched and still followed to their end
      yield* Scope.close(scopeB, Exit.void)
      expect((yield* Effect.forEach(handlesB, (h) => h.outcome)).map((o) => o._tag)).toEqual(["Cancelled", "Cancelled"])
      expect(d.deletes.map((x) => x.name).sort()).toEqual(ofB.map((s) => jobName(s.attemptId)).sort())
      yield* waitFor(() => d.jobs().length === 2)
      release()
      const outcomes = yield* Effect.forEach(adopted, (x) => (x._tag === "Following" ? x.handle.outcome : Effect.die("not followed")))
      expect(outcomes.map((o) => o._tag)).toEqual(["Succeeded", "Succeeded"])
      expect(d.creates).toHaveLength(4)
    }))

  it.scopedLive("takeOver: a Job handed over is relabelled and followed by its new owner; its old owner neither follows nor deletes it", () =>
    Effect.gen(function*() {
      const d = yield* double()
      let release = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      scripted(d, {}, { kind: "complete", afterMs: 10, log: "finished on the new owner\n", gate })
      // a left its Job running when it stopped (a rolling update)
      const scopeA = yield* Scope.make()
      const a = yield* launcherFor(d, { owner: "node-a", onScopeClose: "leave" }).pipe(Scope.extend(scopeA))
      const left = spec()
      const leftHandle = yield* a.launch(left).pipe(Scope.extend(scopeA))
      yield* waitFor(() => d.jobs().length === 1)
      yield* Scope.close(scopeA, Exit.void)
      expect(yield* leftHandle.outcome).toMatchObject({ _tag: "InfraFailed", reason: "handed-over", retryable: false })

      const b = yield* launcherFor(d, { owner: "node-b" })
      const missing = nextId("missing")
      const taken = yield* b.takeOver!([{ attemptId: left.attemptId, namespace: "default" }, { attemptId: missing, namespace: "default" }])
      expect(taken.map((x) => [x._tag, x._tag === "Following" ? x.handle.attemptId : x.attemptId])).toEqual([["Following", left.attemptId], ["Reaped", missing]])
      expect(d.jobs()[0]!.metadata.labels["reins.dev/owner"]).toBe("node-b")
      // a restarted with its old identity finds nothing of its own any more
      expect(yield* (yield* launcherFor(d, { owner: "node-a" })).adopt).toEqual([])

      // a live launcher whose Job is taken over stops following it without deleting it
      const scopeA2 = yield* Scope.make()
      const a2 = yield* launcherFor(d, { owner: "node-a" }).pipe(Scope.extend(scopeA2))
      const moved = spec()
      const movedHandle = yield* a2.launch(moved).pipe(Scope.extend(scopeA2))
      yield* waitFor(() => d.jobs().length === 2)
      const [second] = yield* b.takeOver!([{ attemptId: moved.attemptId, namespace: "default" }])
      expect(yield* movedHandle.outcome).toMatchObject({ _tag: "InfraFailed", reason: "handed-over", message: expect.stringContaining("taken over by launcher node-b") })
      yield* Scope.close(scopeA2, Exit.void)
      expect(d.deletes).toEqual([])

      release()
      const first = taken[0]!
      if (first._tag !== "Following" || second?._tag !== "Following") return yield* Effect.die("not followed")
      expect(yield* first.handle.outcome).toMatchObject({ _tag: "Succeeded" })
      expect(yield* second.handle.outcome).toMatchObject({ _tag: "Succeeded" })
      expect(readFileSync(first.handle.files.stdout, "utf8")).toBe("finished on the new owner\n")
      expect(d.creates).toHaveLength(2)
      // the relabel is a compare-and-swap JSON patch
      expect(d.requests.filter((r) => r.method === "PATCH")).toHaveLength(2)
    }))

  // On the test clock: the launcher's token bucket sleeps on it, so the test decides when a token
  // comes, and each create that reaches the server is the event of one more token (no timing).
  it.scoped("Job creation honours the rate limit (token bucket): a burst, then one create per 1/rate seconds", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const launcher = yield* launcherFor(d, { createRate: { perSecond: 8, burst: 2 } })
      // scoped: interrupted while the test clock is still there, also when an assertion fails
      const launches = yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 6 }, () => spec()), (s) => launcher.launch(s), { concurrency: "unbounded" }))
      // the creates waiting for a token: sleeps due within a second (the rest are reconcile and give-up timers)
      const waiting = Effect.map(TestClock.sleeps(), (due) => [...due].filter((at) => at <= 1_000).sort((a, b) => a - b))
      const settled = (creates: number) =>
        Effect.gen(function*() {
          for (let i = 0; i < 500; i++) {
            if (d.creates.length === creates && d.creates.length + (yield* waiting).length === 6) return
            if (d.creates.length > creates) return
            yield* realSleep(10)
          }
        })
      // the burst is served at once; the other four each wait for their own token, 125 ms apart
      yield* settled(2)
      expect(d.creates).toHaveLength(2)
      expect(yield* waiting).toEqual([125, 250, 375, 500])
      for (const [i, next] of [[3, [250, 375, 500]], [4, [375, 500]], [5, [500]], [6, []]] as const) {
        yield* TestClock.adjust("124 millis")
        yield* settled(i - 1)
        expect(d.creates).toHaveLength(i - 1) // a millisecond early: still waiting
        yield* TestClock.adjust("1 millis")
        yield* settled(i)
        expect(d.creates).toHaveLength(i)
        expect(yield* waiting).toEqual(next)
      }
      expect(yield* Fiber.join(launches)).toHaveLength(6)
    }))

  it.scopedLive("422 Invalid is a clear, non-retried rejection; a name taken by another attempt is a conflict", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const launcher = yield* launcherFor(d, {
        // A template the real API server would reject: a container name with capitals and '_'.
        jobTemplate: (p) => ({ apiVersion: "batch/v1", kind: "Job", metadata: {}, spec: { template: { spec: { restartPolicy: "Never", containers: [{ name: "Bad_Name", image: p.image }] } } } })
      })
      const rejected = yield* Effect.flip(launcher.launch(spec()))
      expect(rejected._tag).toBe("JobRejectedError")
      if (rejected._tag !== "JobRejectedError") return
      expect(rejected).toMatchObject({ status: 422, reason: "Invalid" })
      expect(rejected.message).toContain("spec.template.spec.containers[0].name")
      expect(outcomeOfLaunchError(rejected)).toMatchObject({ reason: "invalid-spec", retryable: false })
      expect(d.requests.filter((r) => r.method === "POST")).toHaveLength(1)

      // Someone else's Job under the name of our attempt.
      const plain = yield* launcherFor(d)
      const s = spec()
      d.scriptFor = () => ({ kind: "hang" })
      yield* Effect.promise(() =>
        fetch(`${d.url}/apis/batch/v1/namespaces/default/jobs`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            apiVersion: "batch/v1",
            kind: "Job",
            metadata: { name: jobName(s.attemptId), annotations: { "reins.dev/attempt-id": "someone-else" } },
            spec: { template: { spec: { restartPolicy: "Never", containers: [{ name: "x", image: "busybox" }] } } }
          })
        })
      )
      const conflict = yield* Effect.flip(plain.launch(s))
      expect(conflict).toMatchObject({ _tag: "JobNameConflictError", existingAttemptId: "someone-else" })
    }))

  it.scopedLive("429 (with Retry-After) and 5xx on create are retried with backoff", () =>
    Effect.gen(function*() {
      const d = yield* double()
      d.failNext({ method: "POST", path: /\/jobs$/, status: 429, retryAfterS: 0, times: 2 })
      d.failNext({ method: "POST", path: /\/jobs$/, status: 503 })
      const launcher = yield* launcherFor(d)
      const handle = yield* launcher.launch(spec())
      expect(yield* handle.outcome).toMatchObject({ _tag: "Succeeded" })
      expect(d.requests.filter((r) => r.method === "POST")).toHaveLength(4)
      expect(d.creates).toHaveLength(1)

      // Beyond the retry budget: a retryable infrastructure failure, not a crash.
      d.failNext({ method: "POST", path: /\/jobs$/, status: 500, times: 10 })
      const failed = yield* Effect.flip(launcher.launch(spec()))
      expect(failed).toMatchObject({ _tag: "KubernetesApiError", status: 500 })
      expect(outcomeOfLaunchError(failed)).toMatchObject({ reason: "api", retryable: true })
    }))

  it.scopedLive("watches are re-established (from the last resourceVersion) when the server closes them", () =>
    Effect.gen(function*() {
      const d = yield* double()
      // The Job ends only once the watches were closed and opened again.
      let release = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      scripted(d, {}, { kind: "complete", afterMs: 0, gate })
      // No reconcile during the test: the outcome can only come through the watch.
      const launcher = yield* launcherFor(d, { reconcileInterval: "1 hour" })
      const handle = yield* launcher.launch(spec())
      yield* waitFor(() => d.openWatches("jobs") === 1 && d.openWatches("pods") === 1 && d.pods().length === 1)
      expect(d.closeWatches()).toBe(2)
      yield* waitFor(() => d.openWatches("jobs") === 1 && d.openWatches("pods") === 1)
      release()
      expect(yield* handle.outcome.pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the Job's end never came through the new watch") })))
        .toMatchObject({ _tag: "Succeeded" })
      const rewatch = d.watchRequests("jobs")
      expect(rewatch).toHaveLength(2)
      // Re-watched from where the first watch was, not relisted.
      expect(rewatch[1]!.query.resourceVersion).toMatch(/^\d+$/)
      expect(Number(rewatch[1]!.query.resourceVersion)).toBeGreaterThanOrEqual(Number(rewatch[0]!.query.resourceVersion))
      expect(launcher.stats.get("default/jobs")).toMatchObject({ relists: 1 })
    }))

  it.scopedLive("a resourceVersion compacted away (410 Gone) makes the watch relist", () =>
    Effect.gen(function*() {
      const d = yield* double()
      scripted(d, {}, { kind: "complete", afterMs: 500 })
      const launcher = yield* launcherFor(d, { reconcileInterval: "1 hour" })
      const handle = yield* launcher.launch(spec())
      yield* waitFor(() => d.watchRequests("jobs").length === 1)
      d.expireNextWatch("jobs")
      d.closeWatches()
      expect(yield* handle.outcome).toMatchObject({ _tag: "Succeeded" })
      // Initial list, then the relist after the 410; the third watch starts from the new list.
      expect(launcher.stats.get("default/jobs")?.relists).toBe(2)
      expect(d.watchRequests("jobs").length).toBeGreaterThanOrEqual(3)
    }))

  it.scopedLive("many attempts at once all end through the watch: out-of-order states never hide an ended Job", () =>
    Effect.gen(function*() {
      const d = yield* double()
      // Jobs end at once, so watch events race the create responses and the initial list.
      scripted(d, {}, { kind: "complete", afterMs: 0 })
      const launcher = yield* launcherFor(d, { reconcileInterval: "1 hour" })
      const outcomes = yield* Effect.forEach(Array.from({ length: 24 }, () => spec()), (s) => Effect.scoped(Effect.flatMap(launcher.launch(s), (h) => h.outcome)), {
        concurrency: 8
      }).pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("an attempt never ended: a watch event was lost") }))
      expect(outcomes.map((o) => o._tag)).toEqual(Array(24).fill("Succeeded"))
      expect(launcher.following()).toBe(0)
    }))

  it.scopedLive("the verifier reads the pod log as the harness's stdout", () =>
    Effect.gen(function*() {
      const d = yield* double()
      scripted(d, {}, { kind: "complete", afterMs: 20, log: "the answer is hello\n" })
      const launcher = yield* launcherFor(d)
      const result = yield* runAttempt(launcher, spec(k8sHarness({ verifier: verifier("judge") })))
      expect(result.outcome._tag).toBe("Succeeded")
      expect(result.verifier).toMatchObject({ _tag: "VerifierReward", value: 1, details: { exit: "0", outcome: "succeeded" } })
    }))

  it.scopedLive("the shipped example (examples/k8s/harness.json + job-template.yaml) makes a Job the API server accepts", () =>
    Effect.gen(function*() {
      const d = yield* double()
      const examples = fileURLToPath(new URL("../../examples/k8s/", import.meta.url))
      const raw = JSON.parse(readFileSync(join(examples, "harness.json"), "utf8"))
      const h = yield* decodeHarnessSpec({ ...raw, kubernetes: { ...raw.kubernetes, job_template: join(examples, "job-template.yaml") } })
      const launcher = yield* launcherFor(d, { namespaces: ["reins"] })
      const handle = yield* launcher.launch(spec(h))
      expect((yield* handle.outcome)._tag).toBe("Succeeded")
      const [job] = d.jobs("reins")
      const podSpec = job.spec.template.spec
      expect(podSpec).toMatchObject({ serviceAccountName: "reins-harness", restartPolicy: "Never", nodeSelector: { "reins.dev/pool": "harness" } })
      expect(podSpec.containers[0]).toMatchObject({ name: "agent", image: "ghcr.io/your-org/swe-agent:2025.11", command: ["python", "-m", "agent", "--max-steps", "30"] })
      expect(podSpec.containers[0].env.map((e: { name: string }) => e.name)).toContain("OPENAI_API_KEY")
      expect(job.metadata.annotations["reins.dev/task-id"]).toBe("t-7")
    }))
})
