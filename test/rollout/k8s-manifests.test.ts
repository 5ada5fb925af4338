/**
 * The shipped manifests (examples/k8s/) against the code they configure, so that they cannot
 * drift apart again:
 *
 * - runtime-nodes.yaml: the rollout Deployment's container env, given to the same function
 *   `reins node --roles rollout` builds its launcher with, selects the Kubernetes Job launcher
 *   in the harness spec's namespace, with the shutdown policy the manifest's comment describes;
 *   the node id (the Jobs' owner) is the pod name.
 * - rbac.yaml: the Role grants exactly the verbs the launcher uses — measured on the API-server
 *   double over a launch, a cancel, a take-over and the watches — in that namespace.
 * - train.yaml: its run config decodes (`reins train`'s own loader), runs its harness as Jobs
 *   in the rollout nodes' namespace, and hands harnesses the Gateway Service's URL.
 */
import { describe, expect, it } from "@effect/vitest"
import { HarnessSpec, KubernetesHarnessSpec, Task } from "@reins/protocol"
import { makeKubernetesLauncher } from "@reins/rollout"
import { LauncherActor, launcherActorLayerFromEnv } from "@reins/rollout/controller"
import { ActorSystem } from "@reins/runtime"
import { Effect, Exit, Layer, Scope } from "effect"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { loadRunConfig } from "reins"
import { afterAll } from "vitest"
import { parseAllDocuments } from "yaml"
import { tempDir, waitFor } from "./helpers.js"
import { K8sDouble } from "./k8sDouble.js"

const examples = fileURLToPath(new URL("../../examples/k8s/", import.meta.url))
const data = tempDir("k8s-manifests")
afterAll(() => data.cleanup())

type Obj = Record<string, any>
const documents = (file: string): Array<Obj> => parseAllDocuments(readFileSync(join(examples, file), "utf8")).map((d) => d.toJSON() as Obj)
const find = (docs: Array<Obj>, kind: string, name: string) => {
  const found = docs.find((d) => d.kind === kind && d.metadata?.name === name)
  if (found === undefined) throw new Error(`no ${kind} ${name}`)
  return found
}

const rolloutContainer = () => {
  const deployment = find(documents("runtime-nodes.yaml"), "Deployment", "reins-rollout")
  const pod = deployment.spec.template.spec
  return { deployment, pod, container: pod.containers.find((c: Obj) => c.name === "node") as Obj }
}

/** The container's plain env values (valueFrom ones left out: the kubelet fills them in). */
const plainEnv = (container: Obj): Record<string, string> =>
  Object.fromEntries((container.env as Array<Obj>).filter((e) => e.value !== undefined).map((e) => [e.name, String(e.value)]))

/** The same kubeconfig an operator writes for a plain-HTTP server (the pods use their service account instead). */
const kubeconfigFile = (d: K8sDouble) => {
  const file = join(data.dir, "kubeconfig")
  writeFileSync(file, `apiVersion: v1
kind: Config
clusters: [{ name: double, cluster: { server: "${d.url}", insecure-skip-tls-verify: true } }]
users: [{ name: t, user: { token: t } }]
contexts: [{ name: double, context: { cluster: double, user: t } }]
current-context: double
`)
  return file
}

const double = Effect.acquireRelease(Effect.promise(() => K8sDouble.start()), (d) => Effect.promise(() => d.close()))

/** The RBAC verb of one request the double saw (null: not an API-resource request). */
const verbOf = (r: { method: string; path: string; query: Readonly<Record<string, string>> }): string | null => {
  const m = /^\/apis?\/(?:batch\/)?v1\/namespaces\/([^/]+)\/(jobs|pods)(?:\/([^/]+)(?:\/(log))?)?$/.exec(r.path)
  if (m === null) return null
  const resource = m[4] === "log" ? "pods/log" : m[2]!
  const group = m[2] === "jobs" ? "batch" : ""
  const verb = r.method === "POST"
    ? "create"
    : r.method === "DELETE"
    ? "delete"
    : r.method === "PATCH"
    ? "patch"
    : m[3] !== undefined
    ? "get"
    : r.query.watch === "true" || r.query.watch === "1"
    ? "watch"
    : "list"
  return `${m[1]} ${group}/${resource} ${verb}`
}

describe("the shipped Kubernetes manifests", () => {
  it.scopedLive("runtime-nodes.yaml: the rollout nodes launch Jobs in the harness namespace, owned by the pod, left running on stop", () =>
    Effect.gen(function*() {
      const { pod, container } = rolloutContainer()
      const env = plainEnv(container)
      expect(env).toMatchObject({ REINS_ROLLOUT_LAUNCHER: "kubernetes", REINS_ROLLOUT_NAMESPACES: "reins", REINS_ROLLOUT_ON_STOP: "leave" })
      expect(container.args).toContain("--roles=rollout")
      // the pod name is the node id, hence the owner of the Jobs the node creates
      expect(container.args).toContain("--id=$(POD_NAME)")
      expect(container.env).toContainEqual({ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } })
      expect(pod.serviceAccountName).toBe("reins-node")
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(10)

      // the code reading that env: a Kubernetes launcher, in namespace reins, that leaves its Jobs
      const d = yield* double
      const previous = process.env.KUBECONFIG
      process.env.KUBECONFIG = kubeconfigFile(d)
      yield* Effect.addFinalizer(() => Effect.sync(() => void (previous === undefined ? delete process.env.KUBECONFIG : (process.env.KUBECONFIG = previous))))
      const nodeId = "reins-rollout-5d8f7b9c4-x2x9k"
      const node = launcherActorLayerFromEnv({ dataDir: data.dir, nodeId, env }).pipe(Layer.provideMerge(ActorSystem.layerLocal({ node: nodeId })))
      yield* Effect.gen(function*() {
        const ref = yield* LauncherActor.ref(`rollout/${nodeId}`, { node: nodeId })
        expect(yield* ref.Capacity()).toMatchObject({ kind: "kubernetes", onStop: "leave", max: Number(env.REINS_ROLLOUT_CONCURRENCY) })
        yield* ref.Adopt()
        // it looked for its own Jobs (owned by the pod's name) in namespace reins
        expect(d.requests).toContainEqual(expect.objectContaining({
          path: "/apis/batch/v1/namespaces/reins/jobs",
          query: { labelSelector: `app.kubernetes.io/managed-by=reins,reins.dev/owner=${nodeId}` }
        }))
      }).pipe(Effect.provide(node))
    }))

  it.scopedLive("rbac.yaml: the Role grants exactly the verbs the launcher uses, in the namespace its Jobs run in", () =>
    Effect.gen(function*() {
      const rbac = documents("rbac.yaml")
      const role = find(rbac, "Role", "reins-rollout-launcher")
      const granted = new Set<string>()
      for (const rule of role.rules as Array<Obj>) {
        for (const group of rule.apiGroups) for (const resource of rule.resources) for (const verb of rule.verbs) granted.add(`${role.metadata.namespace} ${group}/${resource} ${verb}`)
      }
      const binding = find(rbac, "RoleBinding", "reins-rollout-launcher")
      expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: rolloutContainer().pod.serviceAccountName, namespace: "reins" }])

      // everything the launcher does, on the double: launch to the end (log included), cancel,
      // a take-over of another launcher's Job, watches and relists
      const d = yield* double
      let release = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      d.scriptFor = (job) => (job.metadata.annotations["reins.dev/attempt-id"] === "a-hang" ? { kind: "hang" } : { kind: "complete", afterMs: 10, log: "ok\n", gate })
      const harness = new HarnessSpec({
        command: ["agent"],
        timeout_s: 60,
        grace_s: 1,
        kubernetes: new KubernetesHarnessSpec({ image: "registry.example/agent:1", namespace: plainEnv(rolloutContainer().container).REINS_ROLLOUT_NAMESPACES!, ttl_s: 60 })
      })
      const spec = (attemptId: string) => ({
        rolloutId: `r-${attemptId}`,
        attemptId,
        attemptKey: "k",
        task: new Task({ id: "t", input: null }),
        harness,
        endpoints: { openaiBaseUrl: "http://gateway/v1" }
      })
      const options = { dataDir: data.dir, kubeConfig: { _tag: "Instance", kubeConfig: d.kubeConfig() } as const, namespaces: ["reins"], reconcileInterval: "200 millis" as const }
      const first = yield* Scope.make()
      const a = yield* makeKubernetesLauncher({ ...options, owner: "node-a", onScopeClose: "leave" }).pipe(Scope.extend(first))
      yield* a.launch(spec("a-left")).pipe(Scope.extend(first))
      yield* waitFor(() => d.jobs("reins").length === 1)
      yield* Scope.close(first, Exit.void)
      const b = yield* makeKubernetesLauncher({ ...options, owner: "node-b" })
      yield* b.adopt
      const [taken] = yield* b.takeOver!([{ attemptId: "a-left", namespace: "reins" }])
      const hung = yield* b.launch(spec("a-hang"))
      yield* waitFor(() => d.pods("reins").length === 2)
      yield* hung.cancel("done with it")
      release()
      if (taken?._tag !== "Following") return yield* Effect.die("not taken over")
      expect(yield* taken.handle.outcome).toMatchObject({ _tag: "Succeeded" })
      // a relist after the watches (the reconcile interval)
      yield* waitFor(() => (b.stats.get("reins/jobs")?.relists ?? 0) >= 2 && (b.stats.get("reins/pods")?.relists ?? 0) >= 2)

      const used = new Set(d.requests.map(verbOf).filter((v) => v !== null))
      expect([...used].sort()).toEqual([...granted].sort())
    }))

  it.effect("train.yaml: the run config decodes, its harness runs as Jobs where the rollout nodes look, and reaches the Gateway's Service", () =>
    Effect.gen(function*() {
      const docs = documents("train.yaml")
      const file = join(data.dir, "run.json")
      writeFileSync(file, find(docs, "ConfigMap", "reins-run").data["run.json"])
      const { run, trainer } = yield* loadRunConfig(file)
      expect(run.harness.kubernetes).toMatchObject({ namespace: plainEnv(rolloutContainer().container).REINS_ROLLOUT_NAMESPACES })
      expect(trainer.max_infra_failures).toBeGreaterThan(0)
      const job = find(docs, "Job", "reins-train")
      const container = job.spec.template.spec.containers[0]
      expect(container.command).toEqual(["npx", "reins", "train", "/etc/reins/run.json"])
      expect(container.args).toEqual(expect.arrayContaining(["--join=ws://reins-seed.reins.svc:7400", "--no-local-rollouts", "--advertise=ws://$(POD_IP):7400"]))
      // harnesses are handed the Gateway Service's URL, and the Service selects this pod
      const service = find(docs, "Service", "reins-gateway")
      expect(container.args).toContain(`--public-url=http://${service.metadata.name}.reins.svc:${service.spec.ports[0].port}/v1`)
      expect(job.spec.template.metadata.labels).toMatchObject(service.spec.selector)
      // the seed the nodes join through exists
      const seed = find(documents("runtime-nodes.yaml"), "Service", "reins-seed")
      expect(seed.spec.ports).toContainEqual(expect.objectContaining({ port: 7400 }))
    }))
})
