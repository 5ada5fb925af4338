/**
 * The controller's settle decision and entry table in isolation (the controller tests check them
 * end to end): which state and reason an ended attempt is recorded with, when a rollout is retried,
 * and how the table's phase indexes and memory bound follow its entries.
 */
import { AttemptCancelled, AttemptFailed, AttemptLogs, LogCapture, AttemptInfraFailed, AttemptSucceeded, type RolloutEnded, Task } from "@reins/protocol"
import { retryDelayMs, settleDecision } from "@reins/rollout"
import { Deferred, Effect } from "effect"
import { describe, expect, it } from "vitest"
import { EntryTable } from "../../packages/rollout/src/controller/entries.js"

const capture = (path: string) => new LogCapture({ path, bytes: 0, droppedBytes: 0 })
const logs = new AttemptLogs({ stdout: capture("stdout.log"), stderr: capture("stderr.log") })
const infra = (retryable: boolean) => new AttemptInfraFailed({ reason: "node-lost", retryable, message: "gone", durationMs: 1, logs: null })

describe("settleDecision", () => {
  it("records behaviour outcomes as they are and never retries them", () => {
    const ok = new AttemptSucceeded({ exitCode: 0, durationMs: 1, logs })
    expect(settleDecision({ outcome: ok, attemptIndex: 0, maxAttempts: 3, cancelReason: null })).toEqual({ state: "succeeded", reason: "exit code 0", retry: false })
    const failed = new AttemptFailed({ reason: "timeout", exitCode: null, signal: null, message: "after 5 s", durationMs: 1, logs })
    expect(settleDecision({ outcome: failed, attemptIndex: 0, maxAttempts: 3, cancelReason: null })).toEqual({ state: "failed", reason: "timeout: after 5 s", retry: false })
  })

  it("retries a retryable infrastructure failure until maxAttempts, then gives up saying so", () => {
    expect(settleDecision({ outcome: infra(true), attemptIndex: 0, maxAttempts: 3, cancelReason: null }))
      .toEqual({ state: "failed", reason: "infra/node-lost: gone (retried as attempt 2)", retry: true })
    expect(settleDecision({ outcome: infra(true), attemptIndex: 2, maxAttempts: 3, cancelReason: null }))
      .toEqual({ state: "failed", reason: "infra/node-lost: gone (gave up after 3 attempt(s))", retry: false })
    expect(settleDecision({ outcome: infra(false), attemptIndex: 0, maxAttempts: 3, cancelReason: null }))
      .toEqual({ state: "failed", reason: "infra/node-lost: gone", retry: false })
  })

  it("an infrastructure failure of a cancelled rollout is its cancel, never retried", () => {
    expect(settleDecision({ outcome: infra(true), attemptIndex: 0, maxAttempts: 3, cancelReason: "enough" }))
      .toEqual({ state: "cancelled", reason: "cancelled: enough (infra/node-lost: gone)", retry: false })
    const cancelled = new AttemptCancelled({ reason: "enough", durationMs: 1, logs: null })
    expect(settleDecision({ outcome: cancelled, attemptIndex: 1, maxAttempts: 3, cancelReason: "enough" }))
      .toEqual({ state: "cancelled", reason: "cancelled: enough", retry: false })
  })

  it("backs off exponentially up to the maximum", () => {
    expect([1, 2, 3, 4, 10].map((n) => retryDelayMs(n, 1000, 5000))).toEqual([1000, 2000, 4000, 5000, 5000])
  })
})

describe("EntryTable", () => {
  const harness = { command: ["true"] } as never
  const add = (table: EntryTable, n: number, phase: "waiting" | "recovering" = "waiting") =>
    Effect.runSync(Effect.map(Deferred.make<RolloutEnded>(), (ended) =>
      table.add({
        rolloutId: `ro${n}`,
        groupId: "g",
        task: new Task({ id: "t", input: null }),
        taskExtra: undefined,
        harness,
        attempt: { rolloutId: `ro${n}`, attemptId: `at${n}`, index: 0, key: "" },
        ended
      }, phase)))

  it("keeps the phase indexes in line and serves waiting entries in submission order", () => {
    const table = new EntryTable(10)
    const [a, b, c] = [add(table, 0), add(table, 1), add(table, 2, "recovering")]
    expect([table.waiting.size, table.live.size, [...table.recovering.keys()]]).toEqual([2, 3, ["at2"]])
    expect(c.admitted && c.resumed).toBe(true)
    table.setPhase(a, "placed")
    table.requeue(a, 5)
    expect(table.waitingInOrder()).toEqual([a, b])
    table.retryWith(c, { rolloutId: "ro2", attemptId: "at2b", index: 1, key: "k" }, 0)
    expect([c.phase, c.attempt.attemptId, c.resumed, table.recovering.size]).toEqual(["waiting", "at2b", false, 0])
    table.setPhase(b, "ended")
    table.setPhase(b, "waiting") // ended is terminal
    expect([b.phase, table.live.has(b), table.waiting.has(b)]).toEqual(["ended", false, false])
  })

  it("forgets the oldest ended entries beyond retainEnded, and a group once all of it is forgotten", () => {
    const table = new EntryTable(1)
    const [a, b] = [add(table, 0), add(table, 1)]
    table.joinGroup("g", a.rolloutId)
    table.joinGroup("g", b.rolloutId)
    table.setPhase(a, "ended")
    expect(table.byId.has("ro0")).toBe(true)
    table.setPhase(b, "ended")
    expect([table.byId.has("ro0"), table.byId.has("ro1"), table.groups.has("g")]).toEqual([false, true, true])
    expect(table.nextGroupId("t")).toBe("t#0")
  })
})
