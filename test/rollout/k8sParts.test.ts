/**
 * The Kubernetes launcher's pure parts: Job names and label values, template rendering,
 * the token bucket (on Effect's TestClock), the verdict rules, and kubeconfig loading.
 */
import type { V1Job, V1Pod } from "@kubernetes/client-node"
import { describe, expect, it } from "@effect/vitest"
import {
  buildJob,
  classifyJob,
  defaultJobTemplate,
  jobName,
  type JobTemplateParams,
  labelValue,
  loadJobTemplateFile,
  loadKubeConfig,
  makeTokenBucket,
  renderTemplate,
  supersedes
} from "@reins/rollout"
import { Effect, Fiber, TestClock } from "effect"
import { execFileSync } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"
import { tempDir } from "./helpers.js"

const data = tempDir("k8s-parts")
afterAll(() => data.cleanup())

const params: JobTemplateParams = {
  job_name: "reins-a-1",
  namespace: "ml",
  image: "img:1",
  command: ["python", "-m", "agent"],
  cwd: "/work",
  rollout_id: "r-1",
  attempt_id: "a-1",
  task_id: "t-1",
  rollout_label: "r-1",
  attempt_label: "a-1",
  timeout_s: 90.5,
  grace_s: 3,
  ttl_s: 60
}

describe("names", () => {
  it("Job names are DNS labels, deterministic and distinct per attempt id", () => {
    for (const id of ["a1", "Attempt_With.Odd/Chars", "x".repeat(300), "---", "ümlaut id", "UPPER"]) {
      const name = jobName(id)
      expect(name).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
      expect(name.length).toBeLessThanOrEqual(63)
      expect(jobName(id)).toBe(name)
    }
    expect(jobName("Run-1")).not.toBe(jobName("run-1"))
    expect(labelValue("0198c3e2-7b1a-7cc0-9d1e-5b1f2b8f0a11")).toBe("0198c3e2-7b1a-7cc0-9d1e-5b1f2b8f0a11")
    expect(labelValue("has space")).toMatch(/^h-[0-9a-f]{40}$/)
  })
})

describe("Job templates", () => {
  it("placeholders: whole values keep their type, lists splice, text is substituted, unknown names fail", () => {
    const job = renderTemplate(
      {
        metadata: { annotations: { note: "{{attempt_id}} in {{namespace}}" } },
        spec: {
          activeDeadlineSeconds: "{{timeout_s}}",
          template: { spec: { containers: [{ name: "a", command: ["/entry", "{{command}}"], args: "{{command}}", workingDir: "{{cwd}}" }] } }
        }
      },
      params
    )
    expect(job.metadata?.annotations?.note).toBe("a-1 in ml")
    expect(job.spec?.activeDeadlineSeconds).toBe(90.5)
    expect(job.spec?.template.spec?.containers[0]).toEqual({ name: "a", command: ["/entry", "python", "-m", "agent"], args: ["python", "-m", "agent"], workingDir: "/work" })
    expect(() => renderTemplate({ metadata: { name: "{{nope}}" } }, params)).toThrow(/template\.metadata\.name: unknown placeholder \{\{nope\}\}/)
    expect(() => renderTemplate({ metadata: { name: "x-{{command}}" } }, params)).toThrow(/is a list/)
  })

  it.effect("a YAML file is read once and rendered per attempt; a non-Job file is rejected", () =>
    Effect.gen(function*() {
      const path = join(data.dir, "t.yaml")
      writeFileSync(path, `apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      containers:\n        - name: h\n          image: "{{image}}"\n          command: "{{command}}"\n`)
      const template = yield* loadJobTemplateFile(path)
      expect(template(params).spec?.template.spec?.containers[0]).toEqual({ name: "h", image: "img:1", command: ["python", "-m", "agent"] })
      const notJob = join(data.dir, "cm.yaml")
      writeFileSync(notJob, "apiVersion: v1\nkind: ConfigMap\n")
      expect((yield* Effect.flip(loadJobTemplateFile(notJob))).message).toMatch(/apiVersion: batch\/v1 and kind: Job/)
      const broken = join(data.dir, "broken.yaml")
      writeFileSync(broken, "spec: [unclosed\n")
      expect((yield* Effect.flip(loadJobTemplateFile(broken))).message).toMatch(/not valid YAML/)
    }))

  it.effect("buildJob enforces reins' fields over the template's and checks the harness container", () =>
    Effect.gen(function*() {
      const sloppy = (): V1Job => ({
        ...defaultJobTemplate(params),
        metadata: { name: "chosen-by-template", labels: { team: "a" } },
        spec: {
          backoffLimit: 6,
          ttlSecondsAfterFinished: 999999,
          template: { spec: { restartPolicy: "OnFailure", containers: [{ name: "h", image: "other:2", env: [{ name: "OPENAI_API_KEY", value: "leak" }, { name: "KEEP", value: "1" }] }] } }
        }
      })
      const injection = {
        params,
        owner: "ctl",
        env: { OPENAI_API_KEY: "attempt-key" },
        taskJson: "{}",
        maxLogBytes: 1000,
        container: undefined,
        serviceAccount: "reins-harness",
        giveUpAt: 1
      }
      const job = yield* buildJob(sloppy, injection)
      expect(job.metadata).toMatchObject({ name: "reins-a-1", namespace: "ml", labels: { team: "a", "reins.dev/attempt": "a-1", "reins.dev/owner": "ctl" } })
      expect(job.spec).toMatchObject({ backoffLimit: 0, activeDeadlineSeconds: 91, ttlSecondsAfterFinished: 60 })
      expect(job.spec?.template.spec).toMatchObject({ restartPolicy: "Never", serviceAccountName: "reins-harness", terminationGracePeriodSeconds: 3 })
      // The template's image and (absent) command stay as written: only missing ones are filled in.
      expect(job.spec?.template.spec?.containers[0]).toMatchObject({ image: "other:2", command: ["python", "-m", "agent"], env: [{ name: "KEEP", value: "1" }, { name: "OPENAI_API_KEY", value: "attempt-key" }] })
      const noSuch = yield* Effect.flip(buildJob(sloppy, { ...injection, container: "agent" }))
      expect(noSuch.message).toMatch(/no container named agent/)
      const huge = yield* Effect.flip(buildJob(defaultJobTemplate, { ...injection, taskJson: "x".repeat(300_000) }))
      expect(huge.message).toMatch(/more than a pod annotation can hold/)
    }))
})

describe("token bucket", () => {
  it.effect("serves a burst at once, then one token per 1/rate seconds, in arrival order", () =>
    Effect.gen(function*() {
      const bucket = yield* makeTokenBucket({ perSecond: 10, burst: 2 })
      const done: Array<number> = []
      const fibers = yield* Effect.forEach([0, 1, 2, 3, 4], (i) => Effect.fork(bucket.take.pipe(Effect.tap(() => Effect.sync(() => done.push(i))))))
      yield* TestClock.adjust("1 millis")
      expect(done).toEqual([0, 1])
      yield* TestClock.adjust("100 millis")
      expect(done).toEqual([0, 1, 2])
      yield* TestClock.adjust("200 millis")
      expect(done).toEqual([0, 1, 2, 3, 4])
      yield* Effect.forEach(fibers, Fiber.join)
      // Idle time refills up to the burst, not beyond.
      yield* TestClock.adjust("10 seconds")
      const later = yield* Effect.forEach([0, 1, 2], () => Effect.fork(bucket.take))
      yield* TestClock.adjust("1 millis")
      expect((yield* Effect.forEach(later, (f) => f.poll)).filter((p) => p._tag === "Some")).toHaveLength(2)
    }))
})

describe("verdicts", () => {
  const job = (conditions: Array<{ type: string; reason?: string }>): V1Job => ({
    metadata: { name: "j" },
    status: { conditions: conditions.map((c) => ({ ...c, status: "True" })) }
  })
  const pod = (status: V1Pod["status"]): V1Pod => ({ metadata: { name: "p" }, status })

  it("maps Job conditions and pod states to outcomes", () => {
    const obs = (j: V1Job | null, pods: Array<V1Pod> = [], jobGone = false) => ({ job: j, pods, jobGone })
    expect(classifyJob(obs(job([])))).toEqual({ _tag: "Running" })
    expect(classifyJob(obs(job([{ type: "Complete" }])))).toEqual({ _tag: "Succeeded", exitCode: 0 })
    const exited = pod({ phase: "Failed", containerStatuses: [{ name: "h", image: "i", imageID: "", ready: false, restartCount: 0, state: { terminated: { exitCode: 3 } } }] })
    expect(classifyJob(obs(job([{ type: "Failed", reason: "BackoffLimitExceeded" }]), [exited]))).toMatchObject({ _tag: "Failed", reason: "exit", exitCode: 3 })
    expect(classifyJob(obs(job([{ type: "Failed", reason: "DeadlineExceeded" }])))).toMatchObject({ _tag: "Failed", reason: "timeout" })
    const oom = pod({ phase: "Failed", containerStatuses: [{ name: "h", image: "i", imageID: "", ready: false, restartCount: 0, state: { terminated: { exitCode: 137, reason: "OOMKilled" } } }] })
    expect(classifyJob(obs(job([{ type: "Failed", reason: "BackoffLimitExceeded" }]), [oom]))).toMatchObject({ _tag: "Infra", reason: "oom-killed", retryable: true })
    expect(classifyJob(obs(job([]), [pod({ phase: "Failed", reason: "Evicted", message: "low on memory" })]))).toMatchObject({ _tag: "Infra", reason: "evicted" })
    expect(classifyJob(obs(job([]), [pod({ phase: "Running", conditions: [{ type: "DisruptionTarget", status: "True", reason: "PreemptionByScheduler" }] })]))).toMatchObject({ _tag: "Infra", reason: "evicted" })
    expect(classifyJob(obs(job([]), [pod({ phase: "Unknown", reason: "NodeLost" })]))).toMatchObject({ _tag: "Infra", reason: "node-lost" })
    const pull = pod({ phase: "Pending", containerStatuses: [{ name: "h", image: "i", imageID: "", ready: false, restartCount: 0, state: { waiting: { reason: "ImagePullBackOff" } } }] })
    expect(classifyJob(obs(job([]), [pull]))).toMatchObject({ _tag: "Infra", reason: "image-pull", retryable: true })
    const secret = pod({ phase: "Pending", containerStatuses: [{ name: "h", image: "i", imageID: "", ready: false, restartCount: 0, state: { waiting: { reason: "CreateContainerConfigError", message: `secret "k" not found` } } }] })
    expect(classifyJob(obs(job([]), [secret]))).toMatchObject({ _tag: "Infra", reason: "invalid-spec", retryable: false })
    expect(classifyJob(obs(job([]), [], true))).toMatchObject({ _tag: "Infra", reason: "lost" })
    // A Job that completed before it was deleted (TTL) still succeeded.
    expect(classifyJob(obs(job([{ type: "Complete" }]), [], true))).toMatchObject({ _tag: "Succeeded" })
  })
})

describe("state ordering", () => {
  it("an older state never replaces a newer one; an ended Job never goes back to running", () => {
    const at = (rv: string, ended = false): V1Job => ({
      metadata: { name: "j", resourceVersion: rv },
      status: ended ? { conditions: [{ type: "Complete", status: "True" }] } : {}
    })
    expect(supersedes(at("10"), null)).toBe(true)
    expect(supersedes(at("11"), at("10"))).toBe(true)
    expect(supersedes(at("9"), at("10", true))).toBe(false)
    expect(supersedes(at("x"), at("y", true))).toBe(false)
    expect(supersedes(at("y", true), at("x"))).toBe(true)
  })
})

describe("kubeconfig", () => {
  it.effect("loads an explicit server, a file, and fails clearly when nothing is configured", () =>
    Effect.gen(function*() {
      const server = yield* loadKubeConfig({ _tag: "Server", server: "http://127.0.0.1:1", skipTLSVerify: true, token: "t" })
      expect(server.getCurrentCluster()?.server).toBe("http://127.0.0.1:1")
      const file = join(data.dir, "kubeconfig")
      writeFileSync(
        file,
        [
          "apiVersion: v1",
          "kind: Config",
          "clusters: [{name: c1, cluster: {server: 'https://k8s.example:6443'}}, {name: c2, cluster: {server: 'https://other:6443'}}]",
          "users: [{name: u, user: {token: abc}}]",
          "contexts: [{name: one, context: {cluster: c1, user: u}}, {name: two, context: {cluster: c2, user: u}}]",
          "current-context: one"
        ].join("\n")
      )
      expect((yield* loadKubeConfig({ _tag: "File", path: file })).getCurrentCluster()?.server).toBe("https://k8s.example:6443")
      expect((yield* loadKubeConfig({ _tag: "File", path: file, context: "two" })).getCurrentCluster()?.server).toBe("https://other:6443")
      expect((yield* Effect.flip(loadKubeConfig({ _tag: "File", path: file, context: "three" }))).message).toMatch(/no context named three/)
      const saved = { KUBECONFIG: process.env.KUBECONFIG, HOME: process.env.HOME }
      try {
        process.env.KUBECONFIG = file
        expect((yield* loadKubeConfig()).getCurrentCluster()?.server).toBe("https://k8s.example:6443")
        process.env.KUBECONFIG = ""
        process.env.HOME = data.dir
        expect((yield* Effect.flip(loadKubeConfig())).message).toMatch(/no kubeconfig found/)
      } finally {
        for (const [k, v] of Object.entries(saved)) {
          if (v === undefined) delete process.env[k]
          else process.env[k] = v
        }
      }
    }))
})

describe("the client library", () => {
  it("is imported when a Kubernetes config is first loaded, not with @reins/rollout (importing it takes ~0.9 s)", () => {
    const log = join(data.dir, "imports.log")
    const hook = fileURLToPath(new URL("./fixtures/record-imports.mjs", import.meta.url))
    const program = [
      "const rollout = await import('@reins/rollout')",
      "const { Effect } = await import('effect')",
      "(await import('node:fs')).appendFileSync(process.env.REINS_IMPORT_LOG, 'IMPORTED\\n')",
      "await Effect.runPromise(rollout.loadKubeConfig({ _tag: 'Server', server: 'http://127.0.0.1:1' }))"
    ].join(";")
    execFileSync(process.execPath, ["--import", hook, "--input-type=module", "-e", program], {
      env: { ...process.env, REINS_IMPORT_LOG: log },
      timeout: 30_000
    })
    const urls = readFileSync(log, "utf8").split("\n")
    const imported = urls.indexOf("IMPORTED")
    expect(imported).toBeGreaterThan(0)
    expect(urls.slice(0, imported).some((u) => /\/rollout\/(dist|src)\/index\.[jt]s$/.test(u))).toBe(true) // the hook saw the import
    expect(urls.slice(0, imported).filter((u) => u.includes("@kubernetes/client-node"))).toEqual([])
    expect(urls.slice(imported).some((u) => u.includes("@kubernetes/client-node"))).toBe(true)
  })
})
