/**
 * The calc agent written with the OpenAI Agents SDK (examples/agents-sdk), unchanged, as a real
 * child process against a real Gateway on loopback: a tiny policy taught the calc conversations
 * the SDK sends (the SDK's default Responses API), and the shipped calc base for a short training
 * run through `Reins.local`. Its calls are recorded as Responses calls with parsed tool calls,
 * each call's prompt extends the previous call's prompt and output ids exactly, the model sees
 * calc's prompt, schema and tool texts, and the exit codes and `ANSWER:` line are calc's.
 */
import { it as effectIt } from "@effect/vitest"
import { isContextFull, isHarnessError } from "@reins/protocol"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { loadRunConfig, trainerConfig } from "reins"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { extractAnswer, runToolCall, SYSTEM_PROMPT, TOOLS } from "../../examples/calc/agent.mjs"
import { evaluate } from "../../examples/calc/calculator.mjs"
import { recorded, startReins, tempDir, tempRun } from "../e2e/run.js"
import { callsOf, isPrefix, type Running, startGateway } from "../gateway/harness.js"
import { type Conversation, tinyPolicy, type TinyPolicy } from "../gateway/policy.js"

type Json = Record<string, any>

const HARNESS = fileURLToPath(new URL("../../examples/agents-sdk/harness.mjs", import.meta.url))
const CONFIG = fileURLToPath(new URL("../../examples/agents-sdk/reins.config.json", import.meta.url))

const { name: TOOL, parameters: PARAMETERS } = TOOLS[0]!.function
/** calc's tool as the SDK sends it (`strict: false`, no description) and the Gateway renders it. */
const sentTools = [{ type: "function" as const, function: { name: TOOL, parameters: PARAMETERS, strict: false } }]
const call = (name: string, args: unknown) => `<tool_call>{"name": "${name}", "arguments": ${JSON.stringify(args)}}</tool_call>`
const toolText = (name: string, args: string) => runToolCall({ function: { name, arguments: args } })

/** A question answered through the tool, and one with calc's mistakes: text beside a call, bad arguments, an unknown tool. */
const conversations: Array<Conversation> = [
  {
    tools: sentTools,
    steps: [
      { add: [{ role: "system", content: SYSTEM_PROMPT }, { role: "user", content: "37+48" }], reply: call(TOOL, { expression: "37+48" }) },
      { add: [{ role: "tool", tool_call_id: "call_0_0", content: "85" }], reply: "The answer is 85." }
    ]
  },
  {
    tools: sentTools,
    steps: [
      { add: [{ role: "system", content: SYSTEM_PROMPT }, { role: "user", content: "6*7" }], reply: `Let me see.\n${call(TOOL, { expr: "6*7" })}` },
      { add: [{ role: "tool", tool_call_id: "call_0_0", content: toolText(TOOL, '{"expr":"6*7"}') }], reply: call("search", { q: "6*7" }) },
      { add: [{ role: "tool", tool_call_id: "call_1_0", content: toolText("search", "{}") }], reply: "I think it is 42." }
    ]
  }
]

// ---------------------------------------------------------------------------------------------
// Harness processes, killed after every test even when it fails.

const children = new Set<ChildProcess>()
afterEach(() => {
  for (const c of children) c.kill("SIGKILL")
  children.clear()
})

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs the harness with only PATH plus `env` (no reins or OpenAI variables of this process), bounded. */
const runHarness = (env: Record<string, string>, args: ReadonlyArray<string> = []): Promise<Run> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [HARNESS, ...args], { env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] })
    children.add(child)
    let stdout = ""
    let stderr = ""
    child.stdout!.on("data", (d) => (stdout += d))
    child.stderr!.on("data", (d) => (stderr += d))
    // Node start-up plus the SDK's import (~1 s of CPU, before any setting is read) take tens of
    // seconds on a busy 2-core machine.
    const timer = setTimeout(() => child.kill("SIGKILL"), 150_000)
    child.on("error", reject)
    child.on("close", (code) => {
      clearTimeout(timer)
      children.delete(child)
      resolve({ code, stdout, stderr })
    })
  })

const lastLine = (text: string) => text.trim().split("\n").at(-1)

// ---------------------------------------------------------------------------------------------

/** Generous per-test bounds: every test runs real harness processes (idle, each takes ~2 s). */
const SLOW = { timeout: 180_000 }

describe("the Agents SDK calc harness against a real Gateway", () => {
  let policy: TinyPolicy
  let gw: Running
  beforeAll(async () => {
    policy = await tinyPolicy({ conversations })
    gw = await startGateway(policy.backend)
  }, 180_000)
  afterAll(async () => {
    await gw?.close()
    await policy?.close()
  })

  /** A fresh attempt and the harness run with its key, as the rollout controller starts it (greedy here). */
  const attempt = async (question: string, env: Record<string, string> = {}) => {
    const a = await gw.attempt({ question })
    const run = await runHarness({ OPENAI_BASE_URL: a.baseUrl, OPENAI_API_KEY: a.key, REINS_TASK: JSON.stringify({ question }), CALC_TEMPERATURE: "0", ...env })
    return { run, calls: await callsOf(gw, a.rolloutId) }
  }

  /** Each call after the first extends the previous call's prompt and output ids exactly. */
  const expectChain = (calls: Array<any>) => {
    expect(calls[0].reuse).toEqual({ reused_tokens: 0, from_call_id: null, break: null })
    for (let i = 1; i < calls.length; i++) {
      const before = [...calls[i - 1].prompt_token_ids, ...calls[i - 1].output_token_ids]
      expect(isPrefix(before, calls[i].prompt_token_ids)).toBe(true)
      expect(calls[i].reuse).toEqual({ reused_tokens: before.length, from_call_id: calls[i - 1].id, break: null })
    }
  }

  const functionCalls = (c: any) => (c.response.output as Array<any>).filter((o) => o.type === "function_call")
  const toolOutputs = (c: any) => (c.request.input as Array<any>).filter((i) => i.type === "function_call_output")

  it("runs its tool loop over the Responses API, recorded with exact, chained ids", SLOW, async () => {
    const { run, calls } = await attempt("37+48")
    expect([run.code, lastLine(run.stdout), run.stderr]).toEqual([0, "ANSWER: 85", ""])
    expect(calls.map((c) => [c.endpoint, c.protocol, c.status, c.trainable, c.finish_reason])).toEqual([
      ["responses", "openai", 200, true, "tool_calls"],
      ["responses", "openai", 200, true, "stop"]
    ])
    // What the SDK sends: calc's prompt as instructions, the question, calc's schema unchanged, the settings.
    expect(calls[0].request).toMatchObject({
      model: policy.modelId,
      instructions: SYSTEM_PROMPT,
      input: [{ role: "user", content: "37+48" }],
      tools: [{ type: "function", name: TOOL, parameters: PARAMETERS, strict: false }],
      temperature: 0,
      max_output_tokens: 64
    })
    expect(calls[0].request.stream).not.toBe(true)
    // The tool call was parsed from the sampled text; the SDK ran calc's tool and sent its result back by call_id.
    const [fc] = functionCalls(calls[0])
    expect([fc.name, JSON.parse(fc.arguments)]).toEqual([TOOL, { expression: "37+48" }])
    expect(toolOutputs(calls[1])).toMatchObject([{ call_id: fc.call_id, output: "85" }])
    expect(policy.tokenizer.decode(calls[1].output_token_ids)).toBe("The answer is 85.<|im_end|>")
    for (const c of calls) expect(c.output_logprobs).toHaveLength(c.output_token_ids.length)
    expectChain(calls)
  })

  it("tells the model calc's texts for bad arguments and an unknown tool, and keeps the chain through text beside a call", SLOW, async () => {
    const { run, calls } = await attempt("6*7", { CALC_VERBOSE: "1" })
    expect([run.code, lastLine(run.stdout)]).toEqual([0, "ANSWER: 42"])
    expect(run.stderr).toContain('tool calculate({"expr":"6*7"}) -> error: arguments must be JSON')
    expect(calls.map((c) => [c.status, c.finish_reason])).toEqual([[200, "tool_calls"], [200, "tool_calls"], [200, "stop"]])
    expect(calls[0].response.output.map((o: any) => o.type)).toEqual(["message", "function_call"])
    expect(toolOutputs(calls[2]).map((o: any) => o.output)).toEqual([
      'error: arguments must be JSON like {"expression": "2+3"}',
      'error: unknown tool "search", use calculate'
    ])
    expectChain(calls)
  })

  it("ends the episode with an empty answer (exit 0) at the turn limit and when the context is full", SLOW, async () => {
    const [limited, full] = await Promise.all([attempt("37+48", { CALC_MAX_TURNS: "1" }), attempt("37+48", { CALC_MAX_TOKENS: "100000", OPENAI_MODEL: policy.modelId })])
    expect([limited.run.code, lastLine(limited.run.stdout)]).toEqual([0, "ANSWER:"])
    expect(limited.calls.map((c) => c.finish_reason)).toEqual(["tool_calls"])
    expect([full.run.code, lastLine(full.run.stdout)]).toEqual([0, "ANSWER:"])
    expect(full.calls.map((c) => c.status)).toEqual([400])
    expect(full.calls[0].error).toMatch(/^context_length_exceeded: /)
  })

  it("exits 2 on a bad task or setting and 1 when the server refuses, with a message", SLOW, async () => {
    const a = await gw.attempt({ question: "1+1" })
    const env = { OPENAI_BASE_URL: a.baseUrl, OPENAI_API_KEY: a.key }
    const [badSetting, badTurns, noTask, refused] = await Promise.all([
      runHarness({ ...env, CALC_TEMPERATURE: "hot" }, ["1+1"]),
      runHarness({ ...env, CALC_MAX_TURNS: "2.5" }, ["1+1"]),
      runHarness({ ...env, REINS_TASK: '{"q": 1}' }),
      runHarness({ ...env, OPENAI_API_KEY: "rk-not-an-attempt-key", OPENAI_MODEL: policy.modelId }, ["1+1"])
    ])
    expect([badSetting.code, badSetting.stdout]).toEqual([2, ""])
    expect(badSetting.stderr).toContain('CALC_TEMPERATURE must be a non-negative number, got "hot"')
    expect([badTurns.code, badTurns.stdout]).toEqual([2, ""])
    expect(badTurns.stderr).toContain('CALC_MAX_TURNS must be a non-negative integer, got "2.5"')
    expect([noTask.code, noTask.stdout]).toEqual([2, ""])
    expect(noTask.stderr).toContain("task has no question")
    expect([refused.code, refused.stdout]).toEqual([1, ""])
    expect(refused.stderr).toContain("agents-sdk harness: server error: 401")
    // None of them reached the model.
    expect(await callsOf(gw, a.rolloutId)).toEqual([])
  })
})

// ---------------------------------------------------------------------------------------------

describe("the Agents SDK calc harness under reins train", () => {
  /** What the harness answered, read from its recorded Responses calls as the SDK reads them. */
  const answerOf = (calls: ReadonlyArray<{ readonly status: number; readonly response: unknown }>): string => {
    const last = calls.at(-1)
    if (last === undefined || last.status !== 200) return "" // no call, or the context filled up
    const output = ((last.response as Json).output ?? []) as Array<Json>
    if (output.some((o) => o.type === "function_call")) return "" // the turn limit ended it mid-loop
    return extractAnswer(output.filter((o) => o.type === "message").flatMap((o) => o.content.map((c: Json) => c.text)).join(""))
  }

  effectIt.scopedLive("trains a version from the calc base through its run config", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { run } = yield* loadRunConfig(CONFIG)
      // The config's relative paths resolve to calc's base, tasks and (from the harness's cwd) verifier.
      expect([run.model, run.tasks, run.harness.cwd, run.eval.tasks]).toEqual([
        fileURLToPath(new URL("../../examples/calc/base", import.meta.url)),
        fileURLToPath(new URL("../../examples/calc/tasks/train.jsonl", import.meta.url)),
        path.dirname(CONFIG),
        fileURLToPath(new URL("../../examples/calc/tasks/test.jsonl", import.meta.url))
      ])
      const reins = yield* startReins(tempRun(run, dir))
      const base = yield* reins.version
      // One group of four: the harness costs ~1 s of CPU per process (the SDK's import).
      const summary = yield* reins.train(trainerConfig({ schedule: "sync", batch_groups: 1, group_size: 4, max_versions: 1, lr: 3e-4, std_scaling: true, checkpoint_every: 0 }))
      expect(summary.versions).toBe(1)
      expect(yield* reins.version).toBe(base + 1)

      const rollouts = yield* recorded(reins)
      expect(rollouts.filter((r) => r.rollout.state === "failed")).toEqual([])
      expect((yield* reins.stack.store.failedCalls).filter(isHarnessError)).toEqual([])
      const finished = rollouts.filter((r) => r.rollout.state === "succeeded")
      expect(finished.length).toBeGreaterThanOrEqual(4)
      for (const r of finished) {
        expect(r.calls.length).toBeGreaterThan(0)
        for (const c of r.calls) {
          expect({ endpoint: c.endpoint, protocol: c.protocol }).toEqual({ endpoint: "responses", protocol: "openai" })
          expect(c.status === 200 || isContextFull(c)).toBe(true)
        }
        expect(r.chained).toBe(true)
        // calc's verifier scored the harness's answer.
        const expected = evaluate((r.rollout.task as Json).input.question)
        const answer = answerOf(r.calls)
        expect(r.rollout.reward).toBe(answer !== "" && Math.abs(Number(answer) - expected) < 1e-6 ? 1 : 0)
      }
      // Where the base called its tool (about a third of its answers; the loop itself is asserted
      // deterministically above), the SDK sent each result back by call_id and the next call
      // reused the whole previous call as its exact ids.
      for (const r of finished) {
        for (let k = 1; k < r.calls.length; k++) {
          const [before, next] = [r.calls[k - 1]!, r.calls[k]!]
          const asked = ((before.response as Json).output as Array<Json>).filter((o) => o.type === "function_call").map((o) => o.call_id)
          const sent = ((next.request as Json).input as Array<Json>).filter((i) => i.type === "function_call_output").slice(-asked.length).map((i) => i.call_id)
          expect(sent).toEqual(asked)
          if (next.status === 200) expect(next.reuse).toMatchObject({ reusedTokens: before.promptIds.length + before.outputIds.length, fromCallId: before.id, break: null })
        }
      }
    }), 300_000)
})
