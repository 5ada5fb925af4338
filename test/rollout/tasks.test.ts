/**
 * Task sets (JSONL parsing, bad lines with line numbers, skip/fail, duplicates), the seeded task
 * queue (GRPO groups, splits, epochs, resume), harness specs and attempt environments.
 */
import { describe, expect, it } from "@effect/vitest"
import { AttemptCancelled, AttemptFailed, AttemptInfraFailed, AttemptLogs, AttemptResult, AttemptSucceeded, HarnessSpec, LogCapture, Task, VerifierError, VerifierReward } from "@reins/protocol"
import {
  attemptEnv,
  attemptStateOf,
  isRetryable,
  outcomeReason,
  rewardDecision,
  decodeHarnessSpec,
  epochOrder,
  loadTaskSet,
  makeTaskQueue,
  parseTaskSet,
  type TaskGroup
} from "@reins/rollout"
import { Effect, Option, Schema } from "effect"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import { tempDir } from "./helpers.js"

const data = tempDir("tasks")
afterAll(() => data.cleanup())

const lines = (...ls: Array<string>) => ls.join("\n")

describe("task sets", () => {
  it.effect("parses JSONL: BOM, CRLF, blank lines, any JSON input, split, extra fields for the verifier", () =>
    Effect.gen(function*() {
      const set = yield* parseTaskSet(
        "\uFEFF" + [
          `{"id": "a", "input": {"q": "2+2?"}, "answer": 4}`,
          ``,
          `{"id": "b", "input": "plain string", "split": "test"}`,
          `   `,
          `{"id": "c", "input": [1, 2, 3], "split": "train"}`,
          `{"id": "d", "input": null}`
        ].join("\r\n") + "\r\n"
      )
      expect(set.problems).toEqual([])
      expect(set.tasks.map((r) => r.task.id)).toEqual(["a", "b", "c", "d"])
      expect(set.byId.get("a")).toMatchObject({ line: 1, extra: { answer: 4 }, task: { input: { q: "2+2?" } } })
      expect(set.byId.get("b")?.task.split).toBe("test")
      expect(set.byId.get("b")?.line).toBe(3)
      expect(set.byId.get("d")?.task.input).toBeNull()
    }))

  const messy = lines(
    `{"id": "ok-1", "input": 1}`,
    `{"id": "ok-1", "input": 2}`,
    `this is not json`,
    `{"id": "", "input": 1}`,
    `{"input": 1}`,
    `{"id": "no-input"}`,
    `{"id": "bad-split", "input": 1, "split": "dev"}`,
    `[1, 2]`,
    `{"id": 42, "input": 1}`,
    `{"id": "ok-2", "input": {"nested": true}}`
  )

  it.effect("bad lines are reported with their line numbers and skipped by default", () =>
    Effect.gen(function*() {
      const set = yield* parseTaskSet(messy)
      expect(set.tasks.map((r) => r.task.id)).toEqual(["ok-1", "ok-2"])
      expect(set.problems.map((p) => [p.line, p.kind])).toEqual([
        [2, "duplicate"],
        [3, "json"],
        [4, "schema"],
        [5, "schema"],
        [6, "schema"],
        [7, "schema"],
        [8, "schema"],
        [9, "schema"]
      ])
      const byLine = new Map(set.problems.map((p) => [p.line, p.message]))
      expect(byLine.get(2)).toBe(`duplicate id "ok-1" (first on line 1)`)
      expect(byLine.get(3)).toMatch(/^not valid JSON/)
      expect(byLine.get(4)).toContain("task id must be a non-empty string")
      expect(byLine.get(5)).toMatch(/^id: /)
      expect(byLine.get(6)).toBe("input: is missing (use null for a task without input)")
      expect(byLine.get(7)).toMatch(/^split: .*"dev"/)
      expect(byLine.get(8)).toBe("expected a JSON object with id and input")
    }))

  it.effect("onBadLine: fail rejects the set, listing every bad line", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(parseTaskSet(messy, { onBadLine: "fail" }))
      expect(error._tag).toBe("TaskSetError")
      expect(error.reason).toBe("bad-lines")
      expect(error.problems).toHaveLength(8)
      expect(error.message).toContain("8 bad line(s)")
      expect(error.message).toContain("line 2: duplicate id")
      expect(error.message).toContain("... and 3 more")
    }))

  it.effect("a file with no usable task, or no file at all, is a clear error", () =>
    Effect.gen(function*() {
      const empty = yield* Effect.flip(parseTaskSet("garbage\n\n"))
      expect(empty).toMatchObject({ _tag: "TaskSetError", reason: "empty" })
      const missing = yield* Effect.flip(loadTaskSet(join(data.dir, "nope.jsonl")))
      expect(missing).toMatchObject({ _tag: "TaskSetError", reason: "unreadable" })
      expect(missing.message).toContain("nope.jsonl")
    }))

  it.effect("loads a file line by line", () =>
    Effect.gen(function*() {
      const path = join(data.dir, "tasks.jsonl")
      writeFileSync(path, Array.from({ length: 500 }, (_, i) => JSON.stringify({ id: `t${i}`, input: { n: i }, split: i % 5 === 0 ? "test" : "train" })).join("\n") + "\n{broken\n")
      const set = yield* loadTaskSet(path)
      expect(set.path).toBe(path)
      expect(set.tasks).toHaveLength(500)
      expect(set.problems).toEqual([expect.objectContaining({ line: 501, kind: "json" })])
    }))
})

describe("task queue", () => {
  const tasks = (n: number, split?: (i: number) => "train" | "test" | undefined) =>
    Array.from({ length: n }, (_, i) => ({ task: new Task({ id: `t${i}`, input: i, split: split?.(i) }), line: i + 1, extra: {} }))

  const drain = (q: { take: (n: number) => Effect.Effect<ReadonlyArray<TaskGroup>> }, n: number) => q.take(n)

  it.effect("hands out GRPO groups of one task, every task once per epoch, in a seeded order", () =>
    Effect.gen(function*() {
      const q = yield* makeTaskQueue({ tasks: tasks(10), groupSize: 8, seed: 7, epochs: 2 })
      const groups = yield* drain(q, 100)
      expect(groups).toHaveLength(20)
      expect(groups.every((g) => g.size === 8)).toBe(true)
      for (const epoch of [0, 1]) {
        const ids = groups.filter((g) => g.epoch === epoch).map((g) => g.record.task.id)
        expect(new Set(ids).size).toBe(10)
      }
      expect(groups[0]!.groupId).toBe(`${groups[0]!.record.task.id}@0`)
      expect(new Set(groups.map((g) => g.groupId)).size).toBe(20)
      expect(yield* q.next).toEqual(Option.none())
      // Same seed → same order; the two epochs are shuffled differently; another seed differs.
      const again = yield* drain(yield* makeTaskQueue({ tasks: tasks(10), groupSize: 8, seed: 7, epochs: 2 }), 100)
      expect(again.map((g) => g.groupId)).toEqual(groups.map((g) => g.groupId))
      expect(epochOrder(10, 7, 0)).not.toEqual(epochOrder(10, 7, 1))
      expect(epochOrder(10, 8, 0)).not.toEqual(epochOrder(10, 7, 0))
      expect([...epochOrder(10, 7, 0)].sort((a, b) => a - b)).toEqual(Array.from({ length: 10 }, (_, i) => i))
    }))

  it.effect("filters by split: no split counts as train", () =>
    Effect.gen(function*() {
      const set = tasks(9, (i) => (i % 3 === 0 ? "test" : i % 3 === 1 ? "train" : undefined))
      const train = yield* drain(yield* makeTaskQueue({ tasks: set, groupSize: 2, seed: 1, epochs: 1 }), 100)
      expect(train.map((g) => g.record.task.id).sort()).toEqual(["t1", "t2", "t4", "t5", "t7", "t8"])
      const test = yield* makeTaskQueue({ tasks: set, groupSize: 1, seed: 1, epochs: 1, split: "test", shuffle: false })
      expect((yield* drain(test, 100)).map((g) => g.record.task.id)).toEqual(["t0", "t3", "t6"])
      const all = yield* makeTaskQueue({ tasks: set, groupSize: 1, seed: 1, epochs: 1, split: "all" })
      expect(all.size).toBe(9)
    }))

  it.effect("resumes exactly from a saved position", () =>
    Effect.gen(function*() {
      const full = yield* drain(yield* makeTaskQueue({ tasks: tasks(7), groupSize: 4, seed: 3, epochs: 3 }), 100)
      const q = yield* makeTaskQueue({ tasks: tasks(7), groupSize: 4, seed: 3, epochs: 3 })
      const first = yield* drain(q, 9)
      const position = yield* q.position
      expect(position).toEqual({ epoch: 1, offset: 2 })
      const resumed = yield* drain(yield* makeTaskQueue({ tasks: tasks(7), groupSize: 4, seed: 3, epochs: 3, start: position }), 100)
      expect([...first, ...resumed].map((g) => g.groupId)).toEqual(full.map((g) => g.groupId))
    }))

  it.effect("rejects a bad group size or an empty split", () =>
    Effect.gen(function*() {
      expect(yield* Effect.flip(makeTaskQueue({ tasks: tasks(3), groupSize: 0, seed: 1 }))).toMatchObject({ _tag: "TaskQueueError" })
      const none = yield* Effect.flip(makeTaskQueue({ tasks: tasks(3), groupSize: 2, seed: 1, split: "test" }))
      expect(none.message).toContain(`no task in split "test"`)
    }))
})

describe("harness specs and attempt environments", () => {
  it.effect("decoding applies defaults and names the offending field", () =>
    Effect.gen(function*() {
      const spec = yield* decodeHarnessSpec({ command: ["python", "agent.py"] })
      expect(spec).toMatchObject({ timeout_s: 600, grace_s: 10, max_log_bytes: 1 << 20, env: {}, inherit_env: true })
      const bad = yield* Effect.flip(decodeHarnessSpec({ command: [], timeout_s: -1, envv: {}, env: { "1BAD": "x" } }))
      expect(bad._tag).toBe("LaunchConfigError")
      expect(bad.message).toMatch(/command/)
      expect(bad.message).toMatch(/timeout_s/)
      expect(bad.message).toMatch(/envv/)
      expect(bad.message).toMatch(/env\.1BAD: .*pattern/)
      expect(bad.message).not.toMatch(/Expected undefined/)
      const k8s = yield* Effect.flip(decodeHarnessSpec({ command: ["x"], kubernetes: { namespace: "ml" } }))
      expect(k8s.message).toMatch(/kubernetes\.image/)
    }))

  it("attempt variables win over the spec's env; the node's OPENAI_*/ANTHROPIC_*/REINS_* never leak", () => {
    const env = attemptEnv({
      spec: new HarnessSpec({ command: ["x"], env: { OPENAI_BASE_URL: "https://api.openai.com/v1", MODE: "fast" } }),
      identity: { rolloutId: "r1", attemptId: "a1", attemptKey: "sk-attempt" },
      task: new Task({ id: "t1", input: { q: "hi" } }),
      endpoints: { openaiBaseUrl: "http://127.0.0.1:8080/v1", rewardUrl: "http://admin:9000/v1/reward" },
      taskFile: "/data/attempts/a1/task.json",
      base: { PATH: "/usr/bin", OPENAI_ORG_ID: "org-dev", ANTHROPIC_API_KEY: "sk-ant-dev", REINS_SECRET: "s", HOME: "/home/u" }
    })
    expect(env).toEqual({
      PATH: "/usr/bin",
      HOME: "/home/u",
      MODE: "fast",
      OPENAI_BASE_URL: "http://127.0.0.1:8080/v1",
      OPENAI_API_KEY: "sk-attempt",
      // The Anthropic SDK appends /v1/messages itself: its base URL is the origin.
      ANTHROPIC_BASE_URL: "http://127.0.0.1:8080",
      ANTHROPIC_API_KEY: "sk-attempt",
      REINS_TASK: `{"q":"hi"}`,
      REINS_TASK_FILE: "/data/attempts/a1/task.json",
      REINS_TASK_ID: "t1",
      REINS_REWARD_URL: "http://admin:9000/v1/reward",
      REINS_ROLLOUT_ID: "r1",
      REINS_ATTEMPT_ID: "a1"
    })
    const isolated = attemptEnv({
      spec: new HarnessSpec({ command: ["x"], inherit_env: false }),
      identity: { rolloutId: "r", attemptId: "a", attemptKey: "k" },
      task: new Task({ id: "t", input: 1 }),
      endpoints: { openaiBaseUrl: "http://gw/v1" },
      taskFile: "/f",
      base: { PATH: "/usr/bin" }
    })
    expect(isolated.PATH).toBeUndefined()
    expect(isolated.REINS_REWARD_URL).toBe("http://gw/v1/reward")
  })
})

describe("controller decisions on a result", () => {
  const logs = new AttemptLogs({ stdout: new LogCapture({ path: "/o", bytes: 0, droppedBytes: 0 }), stderr: new LogCapture({ path: "/e", bytes: 0, droppedBytes: 0 }) })
  const ok = new AttemptSucceeded({ exitCode: 0, durationMs: 5, logs })
  const failed = new AttemptFailed({ reason: "exit", exitCode: 3, signal: null, message: "exit code 3", durationMs: 5, logs })
  const oom = new AttemptInfraFailed({ reason: "oom-killed", retryable: true, message: "OOM", durationMs: 5, logs: null })
  const rejected = new AttemptInfraFailed({ reason: "invalid-spec", retryable: false, message: "422", durationMs: 0, logs: null })
  const cancelled = new AttemptCancelled({ reason: "user", durationMs: 1, logs: null })
  const reward = new VerifierReward({ value: 0.5, details: null, durationMs: 1, logs })
  const result = (outcome: AttemptResult["outcome"], verifier: AttemptResult["verifier"]) =>
    new AttemptResult({ rolloutId: "r", attemptId: "a", outcome, verifier, startedAt: 0, finishedAt: 1 })

  it("maps outcomes to store states, reasons and retries", () => {
    expect([ok, failed, oom, rejected, cancelled].map(attemptStateOf)).toEqual(["succeeded", "failed", "failed", "failed", "cancelled"])
    expect([ok, failed, oom, rejected, cancelled].map(isRetryable)).toEqual([false, false, true, false, false])
    expect(outcomeReason(oom)).toBe("infra/oom-killed: OOM")
    expect(outcomeReason(cancelled)).toBe("cancelled: user")
  })

  it("rewards: verifier for successes, the policy for failures, none for infrastructure", () => {
    expect(rewardDecision(result(ok, reward), "zero")).toEqual({ _tag: "Reward", value: 0.5, source: "verifier" })
    expect(rewardDecision(result(failed, reward), "zero")).toEqual({ _tag: "Reward", value: 0, source: "policy" })
    expect(rewardDecision(result(failed, reward), "drop")._tag).toBe("Drop")
    expect(rewardDecision(result(failed, reward), "verifier")).toMatchObject({ value: 0.5 })
    expect(rewardDecision(result(ok, null), "zero")._tag).toBe("NoVerifierReward")
    const broken = new VerifierError({ reason: "garbage", message: "bad line", exitCode: 0, signal: null, stdoutTail: "x", stderrTail: "", logs: null })
    expect(rewardDecision(result(ok, broken), "zero")).toEqual({ _tag: "NoVerifierReward", reason: "verifier garbage: bad line" })
    expect(rewardDecision(result(oom, null), "zero")._tag).toBe("NoVerifierReward")
  })

  it("results survive the wire (Schema encode → JSON → decode), verifier errors included", () => {
    const broken = new VerifierError({ reason: "timeout", message: "slow", exitCode: null, signal: "SIGTERM", stdoutTail: "a", stderrTail: "b", logs })
    for (const r of [result(ok, reward), result(failed, broken), result(oom, null), result(cancelled, null)]) {
      const wire = JSON.parse(JSON.stringify(Schema.encodeSync(AttemptResult)(r)))
      const back = Schema.decodeUnknownSync(AttemptResult)(wire)
      expect(back).toEqual(r)
      expect(back.outcome).toBeInstanceOf(r.outcome.constructor)
    }
  })
})
