import { describe, expect, it } from "@effect/vitest"
import { SqliteStore, Store } from "@reins/gateway"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { TrainedCall } from "@reins/protocol"
import { Chunk, Effect, Either, Fiber, Option, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { afterAll } from "vitest"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })))
const tempDb = () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "reins-store-"))
  dirs.push(dir)
  return path.join(dir, "nested", "reins.db")
}

const call = (attemptId: string, n: number) => ({
  attemptId,
  endpoint: "chat.completions" as const,
  model: "m",
  status: 200,
  error: null,
  request: { messages: [{ role: "user", content: `hi ${n}` }] },
  response: { ok: true },
  promptIds: Int32Array.from([1, 2, 3, n]),
  outputIds: Int32Array.from([7, 8]),
  logprobs: Float32Array.from([-0.5, -1.25]),
  versions: Int32Array.from([3, 4]),
  finishReason: "stop",
  trainable: true,
  reuse: { reusedTokens: 0, fromCallId: null, break: null },
  timings: { receivedAt: 1, startedAt: 2, firstTokenAt: 3, finishedAt: 4, heldMs: 0 }
})

const withStore = <A, E>(filename: string, f: (s: Store["Type"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(Store, f).pipe(Effect.provide(SqliteStore.layer({ filename })))

describe("SqliteStore", () => {
  it.live("records each call's protocol, and gives calls recorded before that migration OpenAI's", () =>
    Effect.gen(function* () {
      const file = tempDb()
      const { attempt } = yield* withStore(file, (s) => s.createRollout({ task: { q: 1 }, start: true }))
      const [chat, messages] = yield* withStore(file, (s) =>
        Effect.all([s.recordCall(call(attempt.id, 1)), s.recordCall({ ...call(attempt.id, 2), endpoint: "messages" as const, protocol: "anthropic" as const })])
      )
      expect([chat.protocol, messages.protocol]).toEqual(["openai", "anthropic"])
      // A database from before the migration: no protocol column, the migration not applied.
      const applied = yield* Effect.flatMap(SqliteClient.SqliteClient, (sql) =>
        Effect.gen(function* () {
          yield* sql`DROP TABLE trained_calls`
          yield* sql`ALTER TABLE calls DROP COLUMN protocol`
          yield* sql`DELETE FROM reins_migrations WHERE migration_id >= 3`
          return yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM reins_migrations`
        })
      ).pipe(Effect.provide(SqliteClient.layer({ filename: file })))
      expect(applied).toEqual([{ n: 2 }])
      const calls = yield* withStore(file, (s) => s.calls(attempt.id))
      expect(calls.map((c) => [c.endpoint, c.protocol, c.outputIds.length])).toEqual([
        ["chat.completions", "openai", 2],
        ["messages", "openai", 2]
      ])
    }))

  it.live("records what each update trained of each call, per version, and refuses an unknown call", () =>
    Effect.gen(function* () {
      const file = tempDb()
      const { rollout, attempt } = yield* withStore(file, (s) => s.createRollout({ task: null, start: true }))
      const [one, two] = yield* withStore(file, (s) => Effect.all([s.recordCall(call(attempt.id, 1)), s.recordCall(call(attempt.id, 2))]))
      const row = (callId: string, version: number, advantage: number, tokens: number) =>
        new TrainedCall({ callId, rolloutId: rollout.id, version, advantage, weight: 0.25, tokens })
      yield* withStore(file, (s) => s.recordTrained([row(two!.id, 3, -0.5, 1), row(one!.id, 3, -0.5, 2)]))
      // Recorded again into the same version (a retried update): replaced, not doubled.
      yield* withStore(file, (s) => s.recordTrained([row(one!.id, 3, 0.5, 2), row(one!.id, 4, 1.5, 2)]))
      const trained = yield* withStore(file, (s) => s.trainedCalls(rollout.id))
      // By version, then call id.
      const v3 = [[3, one!.id, 0.5, 0.25, 2], [3, two!.id, -0.5, 0.25, 1]].sort((a, b) => (a[1]! < b[1]! ? -1 : 1))
      expect(trained.map((t) => [t.version, t.callId, t.advantage, t.weight, t.tokens])).toEqual([...v3, [4, one!.id, 1.5, 0.25, 2]])
      const refused = yield* withStore(file, (s) => Effect.either(s.recordTrained([row("ca_unknown", 5, 0, 1), row(one!.id, 5, 0, 1)])))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("StoreError")
      // One transaction: the known call of the refused batch was not recorded either.
      expect((yield* withStore(file, (s) => s.trainedCalls(rollout.id))).map((t) => t.version)).toEqual([3, 3, 4])
    }))

  it.live("issues attempt keys that are stored hashed and resolve to their attempt", () =>
    Effect.gen(function* () {
      const file = tempDb()
      const { attempt, key, rollout } = yield* withStore(file, (s) => s.createRollout({ task: { q: 1 }, group: "g", start: true }))
      expect(key).toMatch(/^rk-[A-Za-z0-9_-]{32}$/)
      expect(rollout.state).toBe("running")
      expect(attempt.state).toBe("running")
      // After a reopen the key still resolves; a near miss does not.
      const [found, missing] = yield* withStore(file, (s) => Effect.all([s.attemptByKey(key), s.attemptByKey(key + "x")]))
      expect(Option.getOrThrow(found).id).toBe(attempt.id)
      expect(Option.isNone(missing)).toBe(true)
      // The key itself is nowhere in the file.
      const hashes = yield* Effect.flatMap(SqliteClient.SqliteClient, (sql) => sql<{ key_hash: string }>`SELECT key_hash FROM attempts`).pipe(
        Effect.provide(SqliteClient.layer({ filename: file, readonly: true }))
      )
      expect(hashes).toHaveLength(1)
      expect(hashes[0]!.key_hash).toMatch(/^[0-9a-f]{64}$/)
      expect(hashes[0]!.key_hash).not.toContain(key)
    }))

  it.live("enforces the attempt state machine", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const { attempt, rollout } = yield* s.createRollout({ task: null })
          expect(attempt.state).toBe("queued")
          const bad = yield* Effect.either(s.transition(attempt.id, "succeeded"))
          expect(Either.isLeft(bad) && bad.left._tag).toBe("IllegalTransition")
          const running = yield* s.transition(attempt.id, "running")
          expect(running.startedAt).not.toBeNull()
          const done = yield* s.transition(attempt.id, "failed", "exit 1")
          expect(done.state).toBe("failed")
          expect(done.reason).toBe("exit 1")
          expect(done.finishedAt).not.toBeNull()
          for (const to of ["running", "succeeded", "cancelled", "queued"] as const) {
            const r = yield* Effect.either(s.transition(attempt.id, to))
            expect(Either.isLeft(r) && r.left._tag).toBe("IllegalTransition")
          }
          expect((yield* s.attempt(attempt.id)).state).toBe("failed")
          const missing = yield* Effect.either(s.transition("at_nope", "running"))
          expect(Either.isLeft(missing) && missing.left._tag).toBe("NotFound")
          // A retry is a new attempt with a new key; the rollout mirrors it.
          const retry = yield* s.createAttempt(rollout.id, { start: true })
          expect(retry.attempt.index).toBe(1)
          expect(retry.rollout.state).toBe("running")
          expect(retry.rollout.attempts).toBe(2)
          const busy = yield* Effect.either(s.createAttempt(rollout.id))
          expect(Either.isLeft(busy) && busy.left._tag).toBe("Conflict")
          yield* s.transition(retry.attempt.id, "succeeded")
          expect((yield* s.rollout(rollout.id)).rollout.state).toBe("succeeded")
        })
      )
    }))

  it.live("records calls with exact token arrays and dense sequence numbers, durably", () =>
    Effect.gen(function* () {
      const file = tempDb()
      const { attempt, rollout } = yield* withStore(file, (s) => s.createRollout({ task: "t", start: true }))
      const recorded = yield* withStore(file, (s) =>
        Effect.all(Array.from({ length: 20 }, (_, i) => s.recordCall(call(attempt.id, i))), { concurrency: "unbounded" })
      )
      expect(recorded.map((c) => c.seq).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
      // Reopen the file: everything is there, arrays bit-exact.
      const calls = yield* withStore(file, (s) => s.calls(attempt.id))
      expect(calls).toHaveLength(20)
      const c = calls[0]!
      expect(c.rolloutId).toBe(rollout.id)
      expect(Array.from(c.outputIds)).toEqual([7, 8])
      expect(Array.from(c.logprobs)).toEqual([-0.5, -1.25])
      expect(Array.from(c.versions)).toEqual([3, 4])
      expect(c.promptIds).toBeInstanceOf(Int32Array)
      expect(c.request).toEqual({ messages: [{ role: "user", content: `hi ${c.promptIds[3]}` }] })
      const missing = yield* Effect.either(withStore(file, (s) => s.recordCall(call("at_missing", 0))))
      expect(Either.isLeft(missing) && missing.left._tag).toBe("NotFound")
    }))

  it.live("keeps every reward; the last final one is the rollout's", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const a = yield* s.createRollout({ task: 1, start: true })
          const b = yield* s.createRollout({ task: 2, start: true })
          const c = yield* s.recordCall(call(a.attempt.id, 1))
          const other = yield* s.recordCall(call(b.attempt.id, 1))
          yield* s.addReward({ attemptId: a.attempt.id, value: 0.25, callId: c.id })
          yield* s.addReward({ attemptId: a.attempt.id, value: 1 })
          yield* s.addReward({ attemptId: a.attempt.id, value: 0.5, info: { why: "retry" } })
          const foreign = yield* Effect.either(s.addReward({ attemptId: a.attempt.id, value: 1, callId: other.id }))
          expect(Either.isLeft(foreign) && foreign.left._tag).toBe("NotFound")
          const detail = yield* s.rollout(a.rollout.id)
          expect(detail.rollout.reward).toBe(0.5)
          expect(detail.rewards.map((r) => r.value)).toEqual([0.25, 1, 0.5])
          expect(detail.rewards[0]!.callId).toBe(c.id)
          expect(detail.rewards[2]!.info).toEqual({ why: "retry" })
          expect(detail.calls.map((x) => x.id)).toEqual([c.id])
          expect((yield* s.rollout(b.rollout.id)).rollout.reward).toBeNull()
        })
      )
    }))

  it.live("lists the failed calls outside cancelled rollouts", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const kept = yield* s.createRollout({ task: 1, start: true })
          const cancelled = yield* s.createRollout({ task: 2, start: true })
          yield* s.recordCall(call(kept.attempt.id, 1))
          yield* s.recordCall({ ...call(kept.attempt.id, 2), status: 400, error: "context_length_exceeded: too long" })
          yield* s.recordCall({ ...call(kept.attempt.id, 3), status: 503, error: "draining" })
          yield* s.recordCall({ ...call(cancelled.attempt.id, 1), status: 499, error: "client went away" })
          yield* s.transition(cancelled.attempt.id, "cancelled", "stopped")
          const failed = yield* s.failedCalls
          expect([...failed].sort((a, b) => a.status - b.status)).toEqual([
            { status: 400, error: "context_length_exceeded: too long" },
            { status: 503, error: "draining" }
          ])
        })
      )
    }))

  it.live("lists rollouts newest first with filters and cursors", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const ids: Array<string> = []
          for (let i = 0; i < 7; i++) {
            const r = yield* s.createRollout({ task: i, group: i % 2 ? "odd" : "even", start: i < 5 })
            ids.push(r.rollout.id)
          }
          const p1 = yield* s.rollouts({ limit: 3 })
          expect(p1.rollouts.map((r) => r.id)).toEqual(ids.slice(4).reverse())
          const p2 = yield* s.rollouts({ limit: 3, cursor: p1.next! })
          expect(p2.rollouts.map((r) => r.id)).toEqual(ids.slice(1, 4).reverse())
          const p3 = yield* s.rollouts({ limit: 3, cursor: p2.next! })
          expect(p3.rollouts.map((r) => r.id)).toEqual([ids[0]])
          expect(p3.next).toBeNull()
          expect((yield* s.rollouts({ state: "queued" })).rollouts.map((r) => r.task)).toEqual([6, 5])
          expect((yield* s.rollouts({ group: "odd" })).rollouts.map((r) => r.task)).toEqual([5, 3, 1])
        })
      )
    }))

  it.live("streams the event log, then live events", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const first = yield* s.createRollout({ task: 0, start: true })
          const fiber = yield* s.events(0).pipe(Stream.take(5), Stream.runCollect, Effect.fork)
          yield* s.transition(first.attempt.id, "succeeded")
          yield* s.recordModelVersion({ version: 1, modelId: "m" })
          yield* s.recordModelVersion({ version: 1, modelId: "m" }) // idempotent: no second event
          yield* s.recordEvent("gateway.paused", { mode: "drain" })
          const events = Chunk.toReadonlyArray(yield* Fiber.join(fiber).pipe(Effect.timeout("5 seconds")))
          expect(events.map((e) => e.type)).toEqual([
            "rollout.created",
            "attempt.created",
            "attempt.state",
            "model.version",
            "gateway.paused"
          ])
          expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5])
          expect(events[2]!.data).toEqual({ from: "running", to: "succeeded", reason: null })
          // A late subscriber starting after seq 3 sees only the rest.
          const late = yield* s.events(3).pipe(Stream.take(2), Stream.runCollect, Effect.timeout("5 seconds"))
          expect(Chunk.toReadonlyArray(late).map((e) => e.seq)).toEqual([4, 5])
        })
      )
    }))

  it.live("narrow reads: a rollout's trace without bodies, an attempt's final reward, the unfinished attempts in one query", () =>
    Effect.gen(function* () {
      const file = tempDb()
      yield* withStore(file, (s) =>
        Effect.gen(function* () {
          const done = yield* s.createRollout({ task: { n: 0 }, group: "g", start: true })
          const retried = yield* s.createRollout({ task: { n: 1 }, group: "g", start: true })
          const queued = yield* s.createRollout({ task: { n: 2 } })
          yield* s.recordCall(call(done.attempt.id, 1))
          const full = yield* s.rollout(done.rollout.id)
          const trace = yield* s.rolloutTrace(done.rollout.id)
          expect(full.calls[0]!.request).toEqual({ messages: [{ role: "user", content: "hi 1" }] })
          expect([trace.calls[0]!.request, trace.calls[0]!.response]).toEqual([null, null])
          expect({ ...trace.calls[0]!, request: null, response: null }).toEqual({ ...full.calls[0]!, request: null, response: null })
          expect([trace.rollout, trace.attempts, trace.rewards]).toEqual([full.rollout, full.attempts, full.rewards])

          expect(yield* s.finalReward(done.rollout.id, done.attempt.id)).toBeNull()
          const [first] = yield* s.calls(done.attempt.id)
          yield* s.addReward({ attemptId: done.attempt.id, value: 0.25 })
          yield* s.addReward({ attemptId: done.attempt.id, value: 0.5 })
          yield* s.addReward({ attemptId: done.attempt.id, callId: first!.id, value: 9 }) // a per-turn reward is not final
          expect(yield* s.finalReward(done.rollout.id, done.attempt.id)).toBe(0.5)
          yield* s.transition(done.attempt.id, "succeeded")

          yield* s.transition(retried.attempt.id, "failed", "infra")
          const second = yield* s.createAttempt(retried.rollout.id)
          const left = yield* s.unfinished
          expect(left.map((u) => [u.attempt.rolloutId, u.attempt.id, u.attempt.index, u.attempt.state, u.task, u.group])).toEqual([
            [retried.rollout.id, second.attempt.id, 1, "queued", { n: 1 }, "g"],
            [queued.rollout.id, queued.attempt.id, 0, "queued", { n: 2 }, null]
          ])
          expect(left[0]!.attempt).toEqual(yield* s.attempt(second.attempt.id))
        })
      )
    }))
})
