/**
 * The controller over a real cluster: two `reins node --roles rollout` processes run the launcher
 * actors, the test process is a third node hosting the controller with the Gateway's SQLite store
 * as its ledger. One launcher node is killed with SIGKILL while attempts run on both: its attempts
 * become `node-lost` infrastructure failures retried on the live node; every rollout reaches a
 * terminal state, none succeeds twice, a rollout never has two live attempts, and every attempt
 * gets exactly one finished event.
 */
import { describe, expect, it } from "@effect/vitest"
import { attemptLogsFromCluster, SqliteStore, Store } from "@reins/gateway"
import { type AttemptFinished, VerifierSpec } from "@reins/protocol"
import { ActorSystem, Node } from "@reins/runtime"
import { Effect, Layer, Option, Redacted, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { afterAll } from "vitest"
import { RolloutController } from "@reins/rollout/controller"
import { freePort, killAll, type NodeProcess, startNode } from "../runtime/fixtures/processes.js"
import { storeLedgerLayer } from "reins"
import { answerTask, baseConfig, controllerFixture, harnessSpec } from "./controllerHelpers.js"
import { killQuietly, waitFor } from "./helpers.js"

const secretValue = `controller-test-${randomBytes(12).toString("hex")}`
const env = { REINS_CLUSTER_SECRET: secretValue, REINS_ROLLOUT_CONCURRENCY: "3" }
const dir = mkdtempSync(path.join(os.tmpdir(), "reins-controller-cluster-"))
const runLog = path.join(dir, "runs.log")

/** Harness processes started by a node that was killed keep running until reaped: kill them here. */
const harnessPids = () =>
  existsSync(runLog) ? readFileSync(runLog, "utf8").split("\n").filter((l) => l.startsWith("start ")).map((l) => Number(l.split(" ")[3])) : []

afterAll(async () => {
  await killAll()
  harnessPids().forEach(killQuietly)
  rmSync(dir, { recursive: true, force: true })
})

const nodeArgs = (name: string, port: number, join?: string) => [
  "--roles", "rollout",
  "--listen", `127.0.0.1:${port}`,
  "--data", path.join(dir, name),
  "--down-after", "5", // generous: on a loaded machine a starved node misses heartbeats; kill -9 is seen at once anyway (the connection closes)
  ...(join ? ["--join", join] : [])
]

describe("rollout controller over a cluster", () => {
  it.scopedLive("a launcher node killed with -9 mid-run: every rollout ends once, its attempts are retried on the live node", () =>
    Effect.gen(function*() {
      // both start at once: b keeps trying to join until a listens
      const portA = yield* Effect.promise(freePort)
      const [a, b]: Array<NodeProcess> = yield* Effect.promise(() =>
        Promise.all([startNode(nodeArgs("a", portA), env), startNode(nodeArgs("b", 0, `ws://127.0.0.1:${portA}`), env)])
      )

      const controllerNode = Node.layer(
        { host: "127.0.0.1", port: 0, dataDir: path.join(dir, "controller"), secret: Redacted.make(secretValue), join: [a.address], roles: ["gateway"], downAfter: "5 seconds" },
        Layer.empty
      )
      const layers = RolloutController.layer(
        // Niceness 0, not the launcher's default 19: beside another test file's computation the
        // harnesses would starve and the group outlast its bounded wait.
        baseConfig({
          harness: harnessSpec({
            env: { RUN_LOG: runLog },
            nice: 0,
            verifier: new VerifierSpec({ command: [process.execPath, controllerFixture("verifier.mjs")], timeout_s: 10, nice: 0 })
          }),
          maxAttempts: 3
        })
      ).pipe(Layer.provideMerge(Layer.merge(storeLedgerLayer.pipe(Layer.provideMerge(SqliteStore.layer({ filename: path.join(dir, "store.db") }))), controllerNode)))

      yield* Effect.gen(function*() {
        const controller = yield* RolloutController
        const store = yield* Store
        const events: Array<AttemptFinished> = []
        yield* Effect.forkScoped(Stream.runForEach(yield* controller.subscribe, (e) => Effect.sync(() => void events.push(e))))

        // both launchers known (membership gossip brings them)
        const launchersUp = Effect.gen(function*() {
          for (let i = 0; i < 300; i++) {
            const s = yield* controller.status
            if (s.launchers.length === 2) return s
            yield* Effect.sleep("100 millis")
          }
          return yield* Effect.die(new Error("the two launchers never showed up"))
        })
        const initial = yield* launchersUp
        expect(initial.launchers.map((l) => l.node).sort()).toEqual([a.id, b.id].sort())
        expect(initial.launchers.every((l) => l.max === 3 && l.kind === "local")).toBe(true)

        // Long enough that, on a loaded machine, b's attempts still run when the sixth has started.
        const group = yield* controller.submit({ task: answerTask("sum", "4", 6_000), size: 6, taskExtra: { reference: "4" } })
        // attempts run on both nodes: kill b mid-run
        const onB = () => Effect.map(controller.status, (s) => s.launchers.find((l) => l.node === b.id)?.running ?? 0)
        yield* Effect.gen(function*() {
          for (let i = 0; i < 600; i++) {
            if ((yield* onB()) > 0 && harnessPids().length >= 6) return
            yield* Effect.sleep("50 millis")
          }
          return yield* Effect.die(new Error("no attempt started on node b"))
        })
        b.process.kill("SIGKILL")

        const ended = yield* controller.awaitGroup(group.groupId).pipe(Effect.timeout("40 seconds"))
        expect(ended.map((e) => e.state)).toEqual(group.rolloutIds.map(() => "succeeded"))
        expect(ended.every((e) => e.reward === 1)).toBe(true)

        let lost = 0
        const stored = new Map<string, string | null>() // attempt id → the reason recorded in the store
        for (const id of group.rolloutIds) {
          const detail = yield* store.rollout(id)
          expect(detail.rollout.state).toBe("succeeded")
          expect(detail.attempts.filter((x) => x.state === "succeeded")).toHaveLength(1) // none twice
          expect(detail.attempts.every((x) => x.finishedAt !== null)).toBe(true) // no live attempt left
          // a rollout never had two live attempts: each retry was created after the previous attempt ended
          for (let i = 1; i < detail.attempts.length; i++) {
            expect(detail.attempts[i]!.createdAt).toBeGreaterThanOrEqual(detail.attempts[i - 1]!.finishedAt!)
          }
          for (const x of detail.attempts.slice(0, -1)) {
            expect(x.state).toBe("failed")
            expect(x.reason).toMatch(/^infra\/node-lost: /)
            lost++
          }
          for (const x of detail.attempts) stored.set(x.id, x.reason)
        }
        expect(lost).toBeGreaterThan(0)

        // every attempt gets exactly one event (the last ones may still be on their way)
        yield* waitFor(() => events.length === stored.size, 5_000)
        expect(events.map((e) => e.attemptId).sort()).toEqual([...stored.keys()].sort())
        // each event says what the store says, and the retried ones say why: b's kill, seen either
        // as node b going down or as the launch call to it breaking
        for (const e of events) expect(e.reason).toBe(stored.get(e.attemptId))
        const bId = b.id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
        const retried = events.filter((e) => !e.final)
        expect(retried).toHaveLength(lost)
        for (const e of retried) {
          expect([e.node, e.state, e.outcome._tag]).toEqual([b.id, "failed", "InfraFailed"])
          expect(e.outcome).toMatchObject({ reason: "node-lost", retryable: true })
          expect(e.reason).toMatch(new RegExp(`^infra/node-lost: (launcher node ${bId} went down|launch on ${bId} failed: .+) \\(retried as attempt ${e.attemptIndex + 2}\\)$`))
        }
        const final = events.filter((e) => e.final)
        expect(final.map((e) => [e.node, e.reason])).toEqual(final.map(() => [a.id, "exit code 0"]))

        // The dashboard's read of an attempt's logs, from this node: node a's launcher has them
        // (the harness's and the verifier's); an attempt nobody ran has none, and says why.
        const system = Option.some(yield* ActorSystem)
        for (const e of final.slice(0, 2)) {
          const { logs, reason } = yield* attemptLogsFromCluster(system, e.attemptId)
          expect(reason).toBeNull()
          expect(logs.find((l) => l.name === "stdout")).toMatchObject({ truncated: false, text: expect.stringContaining("answer: 4") })
          expect(logs.map((l) => l.name)).toContain("verifier.stdout")
        }
        const none = yield* attemptLogsFromCluster(system, "at_0000")
        expect(none.logs).toEqual([])
        expect(none.reason).toMatch(/no logs of it at the 1 launcher\(s\) up/)
      }).pipe(Effect.provide(layers))
    }), { timeout: 90_000 })
})
