/**
 * A controller that restarts on the same ledger (the Gateway's real SQLite store) resumes what its
 * predecessor left `queued`/`running`:
 * - Kubernetes (API-server double): the predecessor stops without cancelling (a crash, or a
 *   rolling restart with `onStop: "leave"`) and its Jobs stay (`onScopeClose: "leave"`); the new
 *   controller's launcher adopts them by label, the controller joins them (no second Job) and
 *   they finish with the verifier's reward (task extras and harness recovered from the ledger).
 *   An adopted Job no rollout waits for is cancelled (deleted).
 * - local processes: an attempt whose processes are gone is failed as `infra/node-lost` and retried
 *   as a new attempt — at once when the restarted launcher reports it reaped the attempt's
 *   leftover process group, else when the recovery window ends.
 */
import { describe, expect, it } from "@effect/vitest"
import { SqliteStore, Store } from "@reins/gateway"
import { type AttemptFinished, HarnessSpec, KubernetesHarnessSpec, Task, VerifierSpec } from "@reins/protocol"
import { jobName, makeKubernetesLauncher } from "@reins/rollout"
import { type ControllerConfig, launcherActorLayer, type LauncherSelection, RolloutController } from "@reins/rollout/controller"
import { ActorSystem } from "@reins/runtime"
import { Context, Effect, Exit, Layer, Scope, Stream } from "effect"
import { spawn } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { storeLedgerLayer } from "reins"
import { afterAll } from "vitest"
import { answerTask, baseConfig, controllerFixture, harnessSpec } from "./controllerHelpers.js"
import { alive, killQuietly, tempDir, waitFor } from "./helpers.js"
import { K8sDouble } from "./k8sDouble.js"

const dirs: Array<{ cleanup: () => void }> = []
const pids: Array<number> = []
afterAll(() => {
  pids.forEach(killQuietly)
  dirs.forEach((d) => d.cleanup())
})
const freshDir = () => {
  const d = tempDir("restart")
  dirs.push(d)
  return d.dir
}

/** One controller incarnation: actor system, launcher actor, controller, on the store file in `dir`. */
const incarnation = (dir: string, launcher: LauncherSelection, config: Partial<ControllerConfig>) =>
  RolloutController.layer(baseConfig(config)).pipe(
    Layer.provideMerge(Layer.merge(launcherActorLayer(launcher, { maxConcurrent: 4 }), storeLedgerLayer)),
    Layer.provideMerge(Layer.merge(ActorSystem.layerLocal(), SqliteStore.layer({ filename: join(dir, "store.db") })))
  )

/** Builds an incarnation in its own scope; `crash` closes it (the controller leaves its rollouts: `onStop: "leave"`). */
const start = (layer: Layer.Layer<RolloutController | Store, unknown>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(layer, scope).pipe(Effect.orDie)
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    return { controller: Context.get(context, RolloutController), store: Context.get(context, Store), crash: Scope.close(scope, Exit.void) }
  })

const collect = (controller: Context.Tag.Service<RolloutController>) =>
  Effect.gen(function*() {
    const events: Array<AttemptFinished> = []
    yield* Effect.forkScoped(Stream.runForEach(yield* controller.subscribe, (e) => Effect.sync(() => void events.push(e))))
    return events
  })

const k8sHarness = (verifier?: VerifierSpec) =>
  new HarnessSpec({
    command: ["python", "-m", "agent"],
    timeout_s: 120,
    grace_s: 5,
    kubernetes: new KubernetesHarnessSpec({ image: "registry.example/agent:1", ttl_s: 600 }),
    ...(verifier === undefined ? {} : { verifier })
  })

describe("controller restart recovery", () => {
  it.scopedLive("Kubernetes: a restarted controller adopts the running Jobs (none created twice) and follows them to their end", () =>
    Effect.gen(function*() {
      const dir = freshDir()
      const d = yield* Effect.acquireRelease(Effect.promise(() => K8sDouble.start()), (x) => Effect.promise(() => x.close()))
      // the Jobs run until the second controller is up: they must outlive the first one
      let release = () => {}
      const gate = new Promise<void>((resolve) => (release = resolve))
      d.scriptFor = () => ({ kind: "complete", afterMs: 20, log: "answer: 4\n", gate })
      const launcher: LauncherSelection = {
        kind: "kubernetes",
        dataDir: join(dir, "launcher"),
        kubeConfig: { _tag: "Instance", kubeConfig: d.kubeConfig() },
        createRate: { perSecond: 1000, burst: 1000 },
        retry: { times: 4, baseMs: 20, maxMs: 200 },
        onScopeClose: "leave"
      }
      // Niceness 0: at the default 19 the verifier starves on a busy machine and times out.
      const verifier = new VerifierSpec({ command: [process.execPath, controllerFixture("verifier.mjs")], timeout_s: 10, nice: 0 })

      // first incarnation: three rollouts whose Jobs run, then it goes away without cancelling anything
      const first = yield* start(incarnation(dir, launcher, { harness: k8sHarness(), onStop: "leave" }))
      // the submission's own harness (with the verifier) and the task's extras must survive the restart
      const group = yield* first.controller.submit({ task: answerTask("sum", "4"), size: 3, taskExtra: { reference: "4" }, harness: k8sHarness(verifier) })
      yield* waitFor(() => d.jobs().length === 3, 20_000)
      yield* Effect.gen(function*() {
        for (let i = 0; i < 200; i++) {
          const states = yield* Effect.forEach(group.rolloutIds, (id) => Effect.map(first.store.rollout(id), (r) => r.rollout.state))
          if (states.every((s) => s === "running")) return
          yield* Effect.sleep("50 millis")
        }
        return yield* Effect.die(new Error("the attempts never ran"))
      })
      yield* first.crash
      expect(d.jobs()).toHaveLength(3)
      expect(d.deletes).toHaveLength(0)

      // a Job labelled by reins that no rollout waits for (its controller died before recording it): cancelled
      const strayScope = yield* Scope.make()
      const stray = yield* makeKubernetesLauncher({ ...launcher, onScopeClose: "leave" }).pipe(Scope.extend(strayScope))
      d.scriptFor = (job) => job.metadata.annotations["reins.dev/attempt-id"] === "at_stray" ? { kind: "hang" } : { kind: "complete", afterMs: 20, log: "answer: 4\n", gate }
      yield* stray.launch({
        rolloutId: "ro_stray",
        attemptId: "at_stray",
        attemptKey: "key-stray",
        task: answerTask("stray", "0"),
        harness: k8sHarness(),
        endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" }
      }).pipe(Scope.extend(strayScope))
      yield* Scope.close(strayScope, Exit.void)

      // second incarnation on the same store: config harness without verifier (the recorded one has it)
      const second = yield* start(incarnation(dir, launcher, { harness: k8sHarness(), recoveryWindow: "30 seconds" }))
      const events = yield* collect(second.controller)
      const status = yield* second.controller.status
      expect(status).toMatchObject({ recovering: 3, started: 3 })
      // joined: the controller follows the running Jobs
      yield* waitFor(() => Effect.runSync(second.controller.status).running === 3, 20_000)
      release()
      const ended = yield* second.controller.awaitGroup(group.groupId).pipe(Effect.timeout("30 seconds"))
      expect(ended.map((e) => [e.state, e.attempts, e.reward])).toEqual(group.rolloutIds.map(() => ["succeeded", 1, 1]))
      expect(d.creates.map((c) => c.name).sort()).toEqual([...(yield* Effect.forEach(group.rolloutIds, (id) =>
        Effect.map(second.store.rollout(id), (r) => jobName(r.attempts[0]!.id)))), jobName("at_stray")].sort())
      for (const id of group.rolloutIds) {
        const detail = yield* second.store.rollout(id)
        expect(detail.attempts.map((a) => [a.state, a.reason])).toEqual([["succeeded", "exit code 0"]])
        expect(detail.rewards.map((r) => r.value)).toEqual([1])
      }
      yield* waitFor(() => events.length === 3)
      expect(events.map((e) => [e.outcome._tag, e.final, e.rewardSource])).toEqual(group.rolloutIds.map(() => ["Succeeded", true, "verifier"]))
      yield* waitFor(() => d.deletes.some((x) => x.name === jobName("at_stray")), 10_000)
      expect(d.deletes.map((x) => x.name)).toEqual([jobName("at_stray")])
      expect(yield* second.controller.status).toMatchObject({ recovering: 0, running: 0, waiting: 0 })
    }), { timeout: 90_000 })

  it.scopedLive("local processes: an orphaned attempt is failed as node-lost and retried as a new attempt", () =>
    Effect.gen(function*() {
      const dir = freshDir()
      const runLog = join(dir, "runs.log")
      const launcher: LauncherSelection = { kind: "local", dataDir: join(dir, "launcher") }
      const harness = harnessSpec({ env: { RUN_LOG: runLog } })
      const runs = () => (existsSync(runLog) ? readFileSync(runLog, "utf8").split("\n").filter((l) => l.startsWith("start ")) : [])

      const first = yield* start(incarnation(dir, launcher, { harness, onStop: "leave" }))
      // the first attempts wait for a file that appears only after the first controller is gone
      const go = join(dir, "go")
      const task = new Task({ id: "sum", input: { mode: "answer", answer: "4", waitFile: go } })
      const group = yield* first.controller.submit({ task, size: 2, taskExtra: { reference: "4" } })
      yield* waitFor(() => runs().length === 2, 20_000)
      const [a, b] = group.rolloutIds
      const attemptOf = (rolloutId: string) => Effect.map(first.store.rollout(rolloutId), (r) => r.attempts[0]!.id)
      const firstAttempts = [yield* attemptOf(a!), yield* attemptOf(b!)]
      yield* first.crash // the launcher closing with it kills both process groups
      const firstPids = runs().map((l) => Number(l.split(" ")[3]))
      expect(firstPids.every((pid) => !alive(pid))).toBe(true)
      writeFileSync(go, "")

      // what kill -9 of the whole node would have left for b: its harness group still running and
      // its pid file; the restarted launcher reaps it and reports b's attempt gone
      const leftover = spawn(process.execPath, ["-e", "setInterval(() => {}, 1 << 30)"], {
        detached: true,
        stdio: "ignore",
        env: { ...process.env, REINS_ATTEMPT_ID: firstAttempts[1]! }
      })
      pids.push(leftover.pid!)
      const attemptDir = join(dir, "launcher", "attempts", firstAttempts[1]!)
      mkdirSync(attemptDir, { recursive: true })
      writeFileSync(join(attemptDir, "pid"), JSON.stringify({ attemptId: firstAttempts[1], rolloutId: b, pgid: leftover.pid }) + "\n")
      yield* waitFor(() => existsSync(`/proc/${leftover.pid}/environ`) && readFileSync(`/proc/${leftover.pid}/environ`, "utf8").includes("REINS_ATTEMPT_ID"))

      const second = yield* start(incarnation(dir, launcher, { harness, recoveryWindow: "2 seconds" }))
      expect(alive(leftover.pid!)).toBe(false) // reaped when the launcher actor started
      const events = yield* collect(second.controller)
      const ended = yield* second.controller.awaitGroup(group.groupId).pipe(Effect.timeout("30 seconds"))
      expect(ended.map((e) => [e.state, e.attempts, e.reward])).toEqual([["succeeded", 2, 1], ["succeeded", 2, 1]])

      for (const [i, id] of group.rolloutIds.entries()) {
        const detail = yield* second.store.rollout(id)
        expect(detail.attempts.map((x) => [x.id === firstAttempts[i], x.state])).toEqual([[true, "failed"], [false, "succeeded"]])
        expect(detail.attempts[0]!.reason).toMatch(/^infra\/node-lost: the controller restarted; .*\(retried as attempt 2\)$/)
        expect(detail.attempts[1]!.createdAt).toBeGreaterThanOrEqual(detail.attempts[0]!.finishedAt!)
      }
      const reasons = Object.fromEntries(
        yield* Effect.forEach(group.rolloutIds, (id) => Effect.map(second.store.rollout(id), (r) => [id, r.attempts[0]!.reason!] as const))
      )
      expect(reasons[a!]).toMatch(/no launcher adopted the attempt within 2s/)
      expect(reasons[b!]).toMatch(/its processes were killed/)
      yield* waitFor(() => events.length === 4)
      for (const id of group.rolloutIds) {
        const mine = events.filter((e) => e.rolloutId === id)
        expect(mine.map((e) => [e.outcome._tag, e.final])).toEqual([["InfraFailed", false], ["Succeeded", true]])
      }
      // one run per attempt: the two of the first controller, one retry each
      expect(runs()).toHaveLength(4)
    }), { timeout: 90_000 })
})
