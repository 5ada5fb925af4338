/**
 * Rollout nodes with the Kubernetes launcher, as `reins node --roles rollout` processes against
 * one API server (the double, on the real wire), the test process being the controller's node
 * (the Gateway's SQLite store as its ledger) or a plain cluster member calling the launchers:
 *
 * - two nodes run their own Jobs; stopping one (SIGTERM, `delete`) deletes its Jobs only, the
 *   other's Jobs and attempts are untouched (they end as attempt 1);
 * - a node killed with -9 and restarted with the same identity adopts its own Jobs and no
 *   others; a node with a new identity adopts nothing of a live node;
 * - a rolling update under `leave`: node A with 4 running Jobs is replaced by node B; the
 *   controller hands A's attempts to B, and no attempt is lost or run twice.
 */
import { describe, expect, it } from "@effect/vitest"
import { SqliteStore, Store } from "@reins/gateway"
import { type AttemptFinished, HarnessSpec, KubernetesHarnessSpec, type LaunchSpec, Task } from "@reins/protocol"
import { jobName } from "@reins/rollout"
import { LauncherActor, RolloutController } from "@reins/rollout/controller"
import { Node } from "@reins/runtime"
import { Effect, Fiber, Layer, Redacted, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { storeLedgerLayer } from "reins"
import { afterAll } from "vitest"
import { freePort, killAll, type NodeProcess, startNode } from "../runtime/fixtures/processes.js"
import { baseConfig } from "./controllerHelpers.js"
import { waitFor } from "./helpers.js"
import { K8sDouble } from "./k8sDouble.js"

const secretValue = `k8s-nodes-${randomBytes(12).toString("hex")}`
const dir = mkdtempSync(path.join(os.tmpdir(), "reins-k8s-nodes-"))
afterAll(async () => {
  await killAll()
  rmSync(dir, { recursive: true, force: true })
})

const NAMESPACE = "reins"
const OWNER = "reins.dev/owner"

/** A kubeconfig file for the double, as an operator writes one for a plain-HTTP server. */
const kubeconfigFor = (d: K8sDouble, name: string) => {
  const file = path.join(dir, `${name}.kubeconfig`)
  writeFileSync(
    file,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      "  - name: double",
      `    cluster: { server: "${d.url}", insecure-skip-tls-verify: true }`,
      "users:",
      "  - name: tester",
      "    user: { token: test-token }",
      "contexts:",
      "  - name: double",
      "    context: { cluster: double, user: tester }",
      "current-context: double",
      ""
    ].join("\n")
  )
  return file
}

/** The double, gated: every Job completes once `release()` is called. */
const gatedDouble = Effect.gen(function*() {
  const d = yield* Effect.acquireRelease(Effect.promise(() => K8sDouble.start()), (x) => Effect.promise(() => x.close()))
  let release = () => {}
  const gate = new Promise<void>((resolve) => (release = resolve))
  d.scriptFor = () => ({ kind: "complete", afterMs: 10, log: "done\n", gate })
  return { d, release: () => release() }
})

const rolloutNode = (
  d: K8sDouble,
  id: string,
  options: { readonly port?: number; readonly join?: string; readonly onStop?: "delete" | "leave"; readonly concurrency?: number; readonly data?: string }
) =>
  Effect.promise(() =>
    startNode(
      [
        "--roles", "rollout",
        "--listen", `127.0.0.1:${options.port ?? 0}`,
        "--data", path.join(dir, options.data ?? id),
        "--id", id,
        "--down-after", "5", // generous on a loaded machine; a kill -9 or a leave is seen at once
        ...(options.join === undefined ? [] : ["--join", options.join]),
        ...(options.onStop === undefined ? [] : ["--rollout-on-stop", options.onStop])
      ],
      {
        REINS_CLUSTER_SECRET: secretValue,
        REINS_ROLLOUT_LAUNCHER: "kubernetes",
        REINS_ROLLOUT_NAMESPACES: NAMESPACE,
        REINS_ROLLOUT_CONCURRENCY: String(options.concurrency ?? 2),
        KUBECONFIG: kubeconfigFor(d, id)
      }
    )
  )

/** Waits (bounded) for a process to exit; its exit code. */
const exited = (p: NodeProcess, ms = 30_000) =>
  Effect.promise(() => p.exited).pipe(Effect.timeoutFail({ duration: ms, onTimeout: () => new Error(`node ${p.id} did not exit:\n${p.output()}`) }))

const harness = new HarnessSpec({
  command: ["python", "-m", "agent"],
  timeout_s: 120,
  grace_s: 5,
  kubernetes: new KubernetesHarnessSpec({ image: "registry.example/agent:1", namespace: NAMESPACE, ttl_s: 600 })
})

const testNode = (join: string, name: string) =>
  Node.layer(
    { host: "127.0.0.1", port: 0, dataDir: path.join(dir, name), secret: Redacted.make(secretValue), join: [join], roles: ["gateway"], downAfter: "5 seconds" },
    Layer.empty
  )

/** The controller on the test process's node, recording into a SQLite store. */
const controllerLayers = (join: string, name: string) =>
  RolloutController.layer(baseConfig({ harness, maxAttempts: 3, recoveryWindow: "30 seconds" })).pipe(
    Layer.provideMerge(Layer.merge(storeLedgerLayer.pipe(Layer.provideMerge(SqliteStore.layer({ filename: path.join(dir, `${name}.db`) }))), testNode(join, name)))
  )

const poll = <A, R>(what: string, f: Effect.Effect<A | undefined, never, R>, ms = 30_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    for (;;) {
      const value = yield* f
      if (value !== undefined) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out after ${ms} ms waiting for ${what}`))
      yield* Effect.sleep("100 millis")
    }
  })

const jobsBy = (d: K8sDouble, owner: string) => d.jobs(NAMESPACE).filter((j) => j.metadata.labels[OWNER] === owner).map((j) => j.metadata.name as string).sort()

describe("Kubernetes rollout nodes", () => {
  it.scopedLive("a second node joins while the first runs Jobs; stopping it deletes only its own, the first's Jobs and attempts are untouched", () =>
    Effect.gen(function*() {
      const { d, release } = yield* gatedDouble
      const a = yield* rolloutNode(d, "node-a", {})
      yield* Effect.gen(function*() {
        const controller = yield* RolloutController
        const store = yield* Store
        yield* poll("node a's launcher", Effect.map(controller.status, (s) => (s.launchers.length === 1 ? s : undefined)))
        const group = yield* controller.submit({ task: new Task({ id: "t", input: { n: 1 } }), size: 4 })
        yield* waitFor(() => d.pods(NAMESPACE).filter((p) => p.status.phase === "Running").length === 2, 30_000)
        const ofA = jobsBy(d, "node-a")
        expect(ofA).toHaveLength(2)

        // node b joins while a's Jobs run: it adopts none of them, and runs the other two
        const b = yield* rolloutNode(d, "node-b", { join: a.address })
        yield* waitFor(() => d.pods(NAMESPACE).filter((p) => p.status.phase === "Running").length === 4, 30_000)
        yield* poll("4 running attempts", Effect.map(controller.status, (s) => (s.running === 4 ? s : undefined)))
        const ofB = jobsBy(d, "node-b")
        expect(ofB).toHaveLength(2)
        expect(jobsBy(d, "node-a")).toEqual(ofA)

        // node b stops (SIGTERM, delete): its Jobs go, node a's stay
        b.process.kill("SIGTERM")
        expect(yield* exited(b)).toBe(0)
        yield* waitFor(() => ofB.every((name) => d.deletes.some((x) => x.name === name)), 20_000)
        expect(d.deletes.map((x) => x.name).sort()).toEqual(ofB)
        expect(jobsBy(d, "node-a")).toEqual(ofA)

        release()
        const ended = yield* controller.awaitGroup(group.groupId).pipe(Effect.timeout("60 seconds"))
        expect(ended.map((e) => e.state)).toEqual(["succeeded", "succeeded", "succeeded", "succeeded"])
        for (const id of group.rolloutIds) {
          const detail = yield* store.rollout(id)
          const first = jobName(detail.attempts[0]!.id)
          if (ofA.includes(first)) {
            // untouched: its one attempt ran to its end on node a
            expect(detail.attempts.map((x) => [x.state, x.reason])).toEqual([["succeeded", "exit code 0"]])
          } else {
            // node b's: deleted with b, retried as a new attempt (on node a)
            expect(ofB).toContain(first)
            expect(detail.attempts.map((x) => x.state)).toEqual(["failed", "succeeded"])
            expect(detail.attempts[0]!.reason).toMatch(/^infra\/node-lost: /)
          }
        }
        expect(d.deletes.map((x) => x.name).sort()).toEqual(ofB) // none of a's, ever
        expect(d.creates).toHaveLength(6)
        // node a goes too, so the next test's cluster (same secret) never meets it
        a.process.kill("SIGTERM")
        expect(yield* exited(a)).toBe(0)
      }).pipe(Effect.provide(controllerLayers(a.address, "controller-1")))
    }), { timeout: 180_000 })

  it.scopedLive("a node killed -9 and restarted with the same identity adopts its own Jobs and no others; a new identity adopts nothing", () =>
    Effect.gen(function*() {
      const { d, release } = yield* gatedDouble
      const port = yield* Effect.promise(freePort)
      const [a, b] = yield* Effect.all([
        rolloutNode(d, "node-c", { port }),
        rolloutNode(d, "node-d", { join: `ws://127.0.0.1:${port}` })
      ], { concurrency: 2 })
      yield* Effect.gen(function*() {
        const launcher = (id: string) => LauncherActor.ref(`rollout/${id}`, { node: id })
        const spec = (attemptId: string): LaunchSpec => ({
          rolloutId: `r-${attemptId}`,
          attemptId,
          attemptKey: `key-${attemptId}`,
          task: new Task({ id: "t", input: null }),
          harness,
          endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" }
        })
        const finished = (id: string, s: LaunchSpec) =>
          Effect.flatMap(launcher(id), (ref) =>
            ref.Launch({ spec: s }).pipe(
              Stream.runCollect,
              Effect.map((updates) => [...updates].find((u) => u._tag === "Finished"))
            ))
        // Both, not only the joiner: a launch to a launcher this node does not know yet fails at
        // once, inside a forked fiber, and the wait for its pod below would only time out.
        const why: Record<string, unknown> = {} // each launcher's last error, for the failure message
        const reachable = (id: string) =>
          Effect.flatMap(launcher(id), (r) => r.Capacity()).pipe(
            Effect.tapBoth({ onFailure: (e) => Effect.sync(() => (why[id] = e)), onSuccess: () => Effect.sync(() => delete why[id]) }),
            Effect.option
          )
        yield* poll(
          "both launchers reachable",
          Effect.map(Effect.all([reachable(a.id), reachable(b.id)]), (os) => (os.every((o) => o._tag === "Some") ? os : undefined))
        ).pipe(Effect.catchAllDefect((d) => Effect.die(new Error(`${(d as Error).message}: ${JSON.stringify(why)}\n--- ${a.id}:\n${a.output()}\n--- ${b.id}:\n${b.output()}`))))
        const onC = `at-c-${randomBytes(3).toString("hex")}`
        const onD = `at-d-${randomBytes(3).toString("hex")}`
        yield* Effect.forkScoped(finished(a.id, spec(onC)))
        const dDone = yield* Effect.forkScoped(finished(b.id, spec(onD)))
        yield* waitFor(() => d.pods(NAMESPACE).filter((p) => p.status.phase === "Running").length === 2, 30_000)
        expect([jobsBy(d, "node-c"), jobsBy(d, "node-d")]).toEqual([[jobName(onC)], [jobName(onD)]])

        a.process.kill("SIGKILL")
        yield* exited(a)
        expect(d.jobs(NAMESPACE)).toHaveLength(2)
        const again = yield* rolloutNode(d, "node-c", { join: b.address })
        yield* poll("the restarted launcher", Effect.option(Effect.flatMap(launcher(again.id), (r) => r.Capacity())).pipe(Effect.map((o) => (o._tag === "Some" ? o : undefined))))
        const adopted = yield* Effect.flatMap(launcher(again.id), (r) => r.Adopt())
        expect({ following: adopted.following, gone: adopted.gone }).toEqual({ following: [onC], gone: [] })

        const fresh = yield* rolloutNode(d, "node-e", { join: b.address })
        yield* poll("the new launcher", Effect.option(Effect.flatMap(launcher(fresh.id), (r) => r.Capacity())).pipe(Effect.map((o) => (o._tag === "Some" ? o : undefined))))
        const none = yield* Effect.flatMap(launcher(fresh.id), (r) => r.Adopt())
        expect({ following: none.following, gone: none.gone }).toEqual({ following: [], gone: [] })
        expect(jobsBy(d, "node-d")).toEqual([jobName(onD)])

        release()
        // node d's attempt went on undisturbed; node c's is joined where it was adopted
        const endD = yield* Fiber.join(dDone)
        expect(endD).toMatchObject({ _tag: "Finished", result: { outcome: { _tag: "Succeeded" } } })
        const endC = yield* finished(again.id, { ...spec(onC), adoptOnly: true })
        expect(endC).toMatchObject({ _tag: "Finished", result: { outcome: { _tag: "Succeeded" } } })
        expect(d.creates).toHaveLength(2)
        expect(d.deletes).toEqual([])
      }).pipe(Effect.provide(testNode(b.address, "member-2")))
    }), { timeout: 180_000 })

  it.scopedLive("rolling update under leave: node A with 4 running Jobs is replaced by node B; no attempt is lost or run twice", () =>
    Effect.gen(function*() {
      const { d, release } = yield* gatedDouble
      const a = yield* rolloutNode(d, "node-f", { onStop: "leave", concurrency: 4 })
      yield* Effect.gen(function*() {
        const controller = yield* RolloutController
        const store = yield* Store
        const events: Array<AttemptFinished> = []
        yield* Effect.forkScoped(Stream.runForEach(yield* controller.subscribe, (e) => Effect.sync(() => void events.push(e))))
        yield* poll("the launcher", Effect.map(controller.status, (s) => (s.launchers.length === 1 ? s : undefined)))
        const group = yield* controller.submit({ task: new Task({ id: "t", input: { n: 2 } }), size: 4 })
        yield* waitFor(() => d.pods(NAMESPACE).filter((p) => p.status.phase === "Running").length === 4, 30_000)
        yield* poll("4 running attempts", Effect.map(controller.status, (s) => (s.running === 4 ? s : undefined)))
        const ofA = jobsBy(d, "node-f")
        expect(ofA).toHaveLength(4)

        // the replacement comes up first (maxSurge), then the old pod gets SIGTERM
        const b = yield* rolloutNode(d, "node-g", { onStop: "leave", concurrency: 4, join: a.address })
        yield* poll("both launchers", Effect.map(controller.status, (s) => (s.launchers.length === 2 ? s : undefined)))
        a.process.kill("SIGTERM")
        expect(yield* exited(a)).toBe(0)
        // the controller handed A's attempts to B, which relabelled their Jobs and follows them
        yield* waitFor(() => jobsBy(d, "node-g").length === 4, 30_000)
        expect(jobsBy(d, "node-g")).toEqual(ofA)
        yield* poll("4 attempts joined on B", Effect.map(controller.status, (s) => (s.running === 4 && s.recovering === 0 ? s : undefined)))

        release()
        const ended = yield* controller.awaitGroup(group.groupId).pipe(Effect.timeout("60 seconds"))
        expect(ended.map((e) => [e.state, e.attempts])).toEqual(group.rolloutIds.map(() => ["succeeded", 1]))
        for (const id of group.rolloutIds) {
          const detail = yield* store.rollout(id)
          expect(detail.attempts.map((x) => [x.state, x.reason])).toEqual([["succeeded", "exit code 0"]])
        }
        // nothing ran twice, nothing was deleted, each attempt has one event, from node B
        expect(d.creates.map((c) => c.name).sort()).toEqual(ofA)
        expect(d.deletes).toEqual([])
        yield* waitFor(() => events.length === 4)
        expect(events.map((e) => [e.node, e.final, e.outcome._tag])).toEqual(events.map(() => [b.id, true, "Succeeded"]))
        b.process.kill("SIGTERM")
        expect(yield* exited(b)).toBe(0)
        expect(d.deletes).toEqual([]) // leave: B's stop deletes nothing either
      }).pipe(Effect.provide(controllerLayers(a.address, "controller-3")))
    }), { timeout: 180_000 })
})
