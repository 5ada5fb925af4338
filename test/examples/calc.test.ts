/**
 * The calc example (examples/calc): the calculator tool, the task generator and shipped task
 * sets, the demo generator's mix, the verifier on real files, and the harness as a real child
 * process against a scripted OpenAI-compatible HTTP server on loopback — once through reins's
 * own local launcher + verifier, once per edge case (bad tool calls, turn limit, server errors).
 */
import { HarnessSpec, VerifierSpec } from "@reins/protocol"
import { loadTaskSet, makeLocalLauncher, runAttempt } from "@reins/rollout"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, afterEach, describe, expect, it } from "vitest"
import { extractAnswer, firstMessages, runToolCall, SYSTEM_PROMPT, TOOLS } from "../../examples/calc/agent.mjs"
import { calculate, evaluate } from "../../examples/calc/calculator.mjs"
import { DEMO_DEFAULTS, makeDemos } from "../../examples/calc/demos.mjs"
import { type CalcTask, generateTasks, toJsonl } from "../../examples/calc/tasks.mjs"

const example = (name: string) => fileURLToPath(new URL(`../../examples/calc/${name}`, import.meta.url))
const HARNESS = example("harness.mjs")
const VERIFY = example("verify.mjs")

const tmp = mkdtempSync(join(tmpdir(), "reins-calc-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))
let fileSeq = 0
const tmpFile = (content: string) => {
  const path = join(tmp, `f${++fileSeq}`)
  writeFileSync(path, content)
  return path
}

const readTasks = (split: "train" | "test"): Array<CalcTask> =>
  readFileSync(example(`tasks/${split}.jsonl`), "utf8").trim().split("\n").map((l) => JSON.parse(l))

// ---------------------------------------------------------------------------------------------
// Child processes and scripted servers, cleaned up after every test even when it fails.

const children = new Set<ChildProcess>()
const servers = new Set<Server>()
afterEach(async () => {
  for (const c of children) c.kill("SIGKILL")
  children.clear()
  await Promise.all([...servers].map((s) => new Promise((resolve) => (s.closeAllConnections(), s.close(resolve)))))
  servers.clear()
})

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs `node args...` with only PATH plus `env`, killed after a bound. */
const runNode = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] })
    children.add(child)
    let stdout = ""
    let stderr = ""
    child.stdout!.on("data", (d) => (stdout += d))
    child.stderr!.on("data", (d) => (stderr += d))
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000)
    child.on("error", reject)
    child.on("close", (code) => {
      clearTimeout(timer)
      children.delete(child)
      resolve({ code, stdout, stderr })
    })
  })

const lastLine = (text: string) => text.trim().split("\n").at(-1)

interface Recorded {
  readonly method: string
  readonly path: string
  readonly authorization: string | undefined
  readonly body: any
}

type Reply = { readonly status: number; readonly body: unknown }

/**
 * A tiny OpenAI-compatible server: `GET /v1/models` lists `calc-model`; each chat completion is
 * answered by `script(i)` for the i-th chat request. Requests are recorded and checked after the
 * harness exits (an assertion inside the handler would only show up as a 500).
 */
const scriptedServer = async (script: (i: number, body: any) => Reply) => {
  const requests: Array<Recorded> = []
  let chats = 0
  const server = createServer((req, res) => {
    let data = ""
    req.on("data", (c) => (data += c))
    req.on("end", () => {
      const body = data === "" ? null : JSON.parse(data)
      requests.push({ method: req.method!, path: req.url!, authorization: req.headers.authorization, body })
      const reply: Reply = req.url === "/v1/models"
        ? { status: 200, body: { object: "list", data: [{ id: "calc-model", object: "model", created: 0, owned_by: "test" }] } }
        : req.url === "/v1/chat/completions"
        ? script(chats++, body)
        : { status: 404, body: { error: { message: `no route ${req.url}`, type: "invalid_request_error", code: "unknown_url", param: null } } }
      res.writeHead(reply.status, { "content-type": "application/json" })
      res.end(JSON.stringify(reply.body))
    })
  })
  servers.add(server)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}/v1`, requests, chats: () => requests.filter((r) => r.path === "/v1/chat/completions") }
}

const completion = (message: { content: string | null; tool_calls?: ReadonlyArray<unknown> }): Reply => ({
  status: 200,
  body: {
    id: "chatcmpl-test",
    object: "chat.completion",
    created: 0,
    model: "calc-model",
    choices: [{ index: 0, message: { role: "assistant", refusal: null, ...message }, finish_reason: message.tool_calls ? "tool_calls" : "stop", logprobs: null }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }
  }
})
const call = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } })

// ---------------------------------------------------------------------------------------------

describe("calculator", () => {
  it("evaluates + - * / with precedence, parentheses, unary signs and whitespace", () => {
    expect(evaluate("37+48")).toBe(85)
    expect(evaluate("12*7-5")).toBe(79)
    expect(evaluate("2+3*4")).toBe(14)
    expect(evaluate("(2+3)*4")).toBe(20)
    expect(evaluate("20-5-3")).toBe(12) // left-associative
    expect(evaluate("48/4/2")).toBe(6)
    expect(evaluate(" -3 + -(4*2) ")).toBe(-11)
    expect(evaluate("1.5*2")).toBe(3)
    expect(calculate("7/2")).toBe("3.5")
    expect(calculate("1/3")).toBe("0.333333")
    expect(calculate("0.1+0.2")).toBe("0.3")
  })

  it("answers malformed input with an error text, never a throw or eval", () => {
    const cases: Array<[string, string]> = [
      ["", "error: empty expression"],
      ["1+", "error: unexpected end of expression"],
      ["(1+2", 'error: missing ")"'],
      ["1+2)", 'error: unexpected ")" at position 4'],
      ["1 2", 'error: unexpected "2" at position 3'],
      ["2**3", 'error: unexpected "*" at position 3'],
      ["1/0", "error: division by zero"],
      ["1/(2-2)", "error: division by zero"],
      ["process.exit(1)", 'error: unexpected "p" at position 1'],
      ["1e5", 'error: unexpected "e" at position 2'],
      ["(".repeat(40) + "1" + ")".repeat(40), "error: expression nested too deeply"],
      ["-".repeat(50) + "1", "error: expression nested too deeply"],
      ["1+".repeat(150) + "1", "error: expression longer than 200 characters"]
    ]
    for (const [input, message] of cases) expect(calculate(input), input).toBe(message)
    expect(calculate(42 as unknown as string)).toBe("error: expression must be a string")
  })

  it("the tool call handler reports bad arguments and unknown tools to the model", () => {
    expect(runToolCall(call("c", "calculate", '{"expression":"6*7"}'))).toBe("42")
    expect(runToolCall(call("c", "calculate", "not json"))).toMatch(/^error: arguments must be JSON/)
    expect(runToolCall(call("c", "calculate", '{"expr":"1"}'))).toMatch(/^error: arguments must be JSON/)
    expect(runToolCall(call("c", "calculate", "null"))).toMatch(/^error: arguments must be JSON/)
    expect(runToolCall(call("c", "search", "{}"))).toBe('error: unknown tool "search", use calculate')
    expect(runToolCall({})).toBe("error: unknown tool null, use calculate")
  })

  it("the answer is the last number of the final text, else the text on one line", () => {
    expect(extractAnswer("The answer is 85.")).toBe("85")
    expect(extractAnswer("12*7 = 084")).toBe("84")
    expect(extractAnswer("-5")).toBe("-5")
    expect(extractAnswer("2.50")).toBe("2.5")
    expect(extractAnswer("  no\nidea ")).toBe("no idea")
    expect(extractAnswer(null)).toBe("")
  })
})

describe("task sets", () => {
  it("are deterministic for a seed, disjoint by expression, with answers that are the expressions' values", () => {
    const a = generateTasks({ seed: 5, train: 300, test: 50 })
    expect(generateTasks({ seed: 5, train: 300, test: 50 })).toEqual(a)
    expect(generateTasks({ seed: 6, train: 300, test: 50 }).train).not.toEqual(a.train)
    const all = [...a.train, ...a.test]
    expect(new Set(all.map((t) => t.id)).size).toBe(350)
    expect(new Set(all.map((t) => t.expression)).size).toBe(350)
    for (const t of all) {
      expect(t.answer).toBe(evaluate(t.expression))
      expect(Number.isInteger(t.answer) && t.answer >= 0 && t.answer <= 999).toBe(true)
      expect(t.input.question).toBe(t.expression)
    }
    expect(a.test.every((t) => t.split === "test") && a.train.every((t) => t.split === "train")).toBe(true)
  })

  it("word problems carry the expression they stand for", () => {
    const { train } = generateTasks({ seed: 2, train: 60, test: 0, word: 1 })
    for (const t of train) {
      expect(t.input.question).toMatch(/^[A-Z][a-z]+ .*\?$/)
      expect(t.answer).toBe(evaluate(t.expression))
    }
  })

  it("the shipped files are what the default command writes, and reins loads them cleanly", async () => {
    const sets = generateTasks()
    expect(readFileSync(example("tasks/train.jsonl"), "utf8")).toBe(toJsonl(sets.train))
    expect(readFileSync(example("tasks/test.jsonl"), "utf8")).toBe(toJsonl(sets.test))
    const test = await Effect.runPromise(loadTaskSet(example("tasks/test.jsonl"), { onBadLine: "fail" }))
    expect(test.tasks).toHaveLength(100)
    expect(test.tasks[0]!.task.split).toBe("test")
    expect(test.tasks[0]!.extra).toEqual({ answer: sets.test[0]!.answer, expression: sets.test[0]!.expression })
    expect(test.tasks[0]!.task.input).toEqual({ question: sets.test[0]!.input.question })
  })

  it("the command line writes both files and rejects bad options", async () => {
    const out = join(tmp, "tasks-cli")
    const ok = await runNode([example("tasks.mjs"), "--seed", "3", "--train", "20", "--test", "5", "--out", out])
    expect(ok.code).toBe(0)
    expect(readFileSync(join(out, "train.jsonl"), "utf8")).toBe(toJsonl(generateTasks({ seed: 3, train: 20, test: 5 }).train))
    const bad = await runNode([example("tasks.mjs"), "--word", "2", "--out", out])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("--word must be a number in [0, 1]")
  })
})

describe("demos", () => {
  const train = readTasks("train")
  const testQuestions = new Set(readTasks("test").map((t) => t.input.question))

  it("have the default mix, each kind with its intended mistake, over train questions only", () => {
    const demos = makeDemos(train)
    const count = (k: string) => demos.filter((d) => d.kind === k).length
    expect(demos).toHaveLength(DEMO_DEFAULTS.n)
    expect([count("direct"), count("wrong-expression"), count("miscopy"), count("correct")]).toEqual([1200, 100, 100, 600])
    const byQuestion = new Map(train.map((t) => [t.input.question, t]))
    expect(new Set(demos.map((d) => d.messages[1]!.content)).size).toBe(demos.length)
    for (const d of demos) {
      const [system, user, ...rest] = d.messages as Array<any>
      expect(system).toEqual({ role: "system", content: SYSTEM_PROMPT })
      expect(testQuestions.has(user.content)).toBe(false)
      const task = byQuestion.get(user.content)!
      expect(d.tools).toEqual(TOOLS)
      const final = rest.at(-1)
      expect(final.role).toBe("assistant")
      expect(final.tool_calls).toBeUndefined()
      if (d.kind === "direct") {
        expect(rest).toHaveLength(1)
        expect(final.content).toMatch(/^It is -?\d+(\.\d+)?\.$/)
        expect(Number(extractAnswer(final.content))).not.toBe(task.answer)
        continue
      }
      const [asked, tool] = rest
      expect(asked.content).toBeNull()
      expect(asked.tool_calls).toHaveLength(1)
      expect(asked.tool_calls[0].id).toMatch(/^call_[A-Za-z0-9_-]{12}0$/)
      expect(tool.tool_call_id).toBe(asked.tool_calls[0].id)
      const { expression } = JSON.parse(asked.tool_calls[0].function.arguments)
      expect(tool.content).toBe(calculate(expression))
      if (d.kind === "correct") expect([expression, final.content]).toEqual([task.expression, String(task.answer)])
      if (d.kind === "wrong-expression") {
        expect(expression).not.toBe(task.expression)
        expect(final.content).toBe(tool.content)
        expect(Number(final.content)).not.toBe(task.answer)
      }
      if (d.kind === "miscopy") {
        expect([expression, tool.content]).toEqual([task.expression, String(task.answer)])
        expect(Number(final.content)).not.toBe(task.answer)
      }
    }
  })

  it("fractions are options; impossible mixes are refused", () => {
    const demos = makeDemos(train, { n: 100, seed: 9, direct: 0.2, wrongExpression: 0, miscopy: 0.1 })
    expect(demos.filter((d) => d.kind === "correct")).toHaveLength(70)
    expect(makeDemos(train, { n: 100, seed: 9, direct: 0.2, wrongExpression: 0, miscopy: 0.1 })).toEqual(demos)
    expect(() => makeDemos(train, { n: 10, direct: 0.9, miscopy: 0.2 })).toThrow(/must not exceed 1/)
    expect(() => makeDemos(train, { n: 5000 })).toThrow(/only 2000 train tasks/)
  })

  it("the command line writes {messages, tools} per line", async () => {
    const out = join(tmp, "demos.jsonl")
    const run = await runNode([example("demos.mjs"), "--n", "40", "--seed", "4", "--out", out])
    expect(run.code).toBe(0)
    expect(run.stdout).toContain("wrote 40 demos")
    const lines = readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
    expect(lines).toHaveLength(40)
    const expected = makeDemos(train, { n: 40, seed: 4 })
    lines.forEach((l, i) => expect(l).toEqual({ messages: expected[i]!.messages, tools: TOOLS }))
  })
})

describe("verifier", () => {
  const task = (answer: unknown) => tmpFile(JSON.stringify({ id: "t", input: { question: "40+2" }, split: "test", answer }))
  const verify = (taskFile: string, stdout: string | null) =>
    runNode([VERIFY], { REINS_TASK_FILE: taskFile, REINS_STDOUT_FILE: stdout === null ? join(tmp, "missing") : tmpFile(stdout) })

  it("prints 1 for the right answer and 0 otherwise", async () => {
    const runs = await Promise.all([
      verify(task(42), "ANSWER: 42\n"),
      verify(task(42), "log line\nANSWER: 7\nANSWER: 42.0\n"), // the last ANSWER line counts
      verify(task(42), "ANSWER: 41\n"),
      verify(task(42), "ANSWER: 42 apples\n"),
      verify(task(42), "ANSWER: \n"),
      verify(task(42), "42\n"),
      verify(task(42), null) // the harness wrote nothing
    ])
    expect(runs.map((r) => [r.code, r.stdout])).toEqual([[0, "1\n"], [0, "1\n"], [0, "0\n"], [0, "0\n"], [0, "0\n"], [0, "0\n"], [0, "0\n"]])
  })

  it("reads REINS_TASK when there is no task file, and refuses a task without an answer", async () => {
    const fromEnv = await runNode([VERIFY], { REINS_TASK: JSON.stringify({ id: "t", input: null, answer: 5 }), REINS_STDOUT_FILE: tmpFile("ANSWER: 5\n") })
    expect([fromEnv.code, fromEnv.stdout]).toEqual([0, "1\n"])
    const noAnswer = await verify(task("42"), "ANSWER: 42\n")
    expect(noAnswer.code).toBe(2)
    expect(noAnswer.stderr).toContain('has no numeric "answer"')
  })
})

describe("harness", () => {
  it("runs a tool loop against an OpenAI-compatible server, exactly as the demos show it; reins's verifier rewards it", async () => {
    // A correct demo is the script: the server says what the demo's assistant says, and the
    // harness must send exactly the demo's messages and tools back.
    const demo = makeDemos(readTasks("train"), { n: 50, seed: 3 }).find((d) => d.kind === "correct")!
    const [, user, toolTurn, , finalTurn] = demo.messages as Array<any>
    const server = await scriptedServer((i) =>
      i === 0 ? completion({ content: null, tool_calls: toolTurn.tool_calls }) : completion({ content: `The answer is ${finalTurn.content}.` })
    )
    const taskLine = readTasks("train").find((t) => t.input.question === user.content)!
    const { task, extra } = await Effect.runPromise(loadTaskSet(tmpFile(JSON.stringify(taskLine)))).then((s) => s.tasks[0]!)
    const launcher = makeLocalLauncher({ dataDir: join(tmp, "launcher"), baseEnv: { PATH: process.env.PATH } })
    // Niceness 0 (the launcher's default is 19): a starved harness would hit its timeout on a busy machine.
    const harness = new HarnessSpec({ command: [process.execPath, HARNESS], timeout_s: 20, grace_s: 1, nice: 0, verifier: new VerifierSpec({ command: [process.execPath, VERIFY], timeout_s: 10, nice: 0 }) })
    const result = await Effect.runPromise(
      Effect.scoped(runAttempt(launcher, { rolloutId: "r-calc", attemptId: "a-calc", attemptKey: "rk-calc", task, taskExtra: extra, harness, endpoints: { openaiBaseUrl: server.url } }))
    )
    const stdout = readFileSync(join(tmp, "launcher", "attempts", "a-calc", "stdout.log"), "utf8")
    expect(lastLine(stdout)).toBe(`ANSWER: ${taskLine.answer}`)
    expect(result.outcome._tag).toBe("Succeeded")
    expect(result.verifier).toMatchObject({ _tag: "VerifierReward", value: 1 })

    expect(server.requests.map((r) => `${r.method} ${r.path}`)).toEqual(["GET /v1/models", "POST /v1/chat/completions", "POST /v1/chat/completions"])
    expect(new Set(server.requests.map((r) => r.authorization))).toEqual(new Set(["Bearer rk-calc"]))
    const [first, second] = server.chats().map((r) => r.body)
    for (const body of [first, second]) {
      expect(body).toMatchObject({ model: "calc-model", temperature: 1, max_tokens: 64 })
      expect(body.tools).toEqual(demo.tools)
    }
    expect(first.messages).toEqual(demo.messages.slice(0, 2))
    expect(second.messages).toEqual(demo.messages.slice(0, 4))
    expect(second.messages[3]).toEqual({ role: "tool", tool_call_id: toolTurn.tool_calls[0].id, content: String(taskLine.answer) })
  })

  it("survives bad tool calls (error text to the model) and takes settings from the environment", async () => {
    const server = await scriptedServer((i) =>
      [
        completion({ content: "hmm", tool_calls: [call("call_a0", "calculate", '{"expr": 1}'), call("call_a1", "calculate", "12*(")] }),
        completion({ content: null, tool_calls: [call("call_b0", "search", '{"q":"x"}'), call("call_b1", "calculate", '{"expression": "3*4"}')] }),
        completion({ content: "I think it is\n12" })
      ][i]!
    )
    const run = await runNode([HARNESS, JSON.stringify({ question: "3*4" })], {
      OPENAI_BASE_URL: server.url,
      OPENAI_API_KEY: "k",
      OPENAI_MODEL: "chosen-model",
      CALC_TEMPERATURE: "0",
      CALC_MAX_TOKENS: "20"
    })
    expect([run.code, lastLine(run.stdout)]).toEqual([0, "ANSWER: 12"])
    expect(server.requests.some((r) => r.path === "/v1/models")).toBe(false)
    const bodies = server.chats().map((r) => r.body)
    expect(bodies).toHaveLength(3)
    expect(bodies[0]).toMatchObject({ model: "chosen-model", temperature: 0, max_tokens: 20 })
    expect(bodies[0].messages).toEqual(firstMessages("3*4"))
    const later = bodies[2].messages.slice(2)
    expect(later[0]).toEqual({ role: "assistant", content: "hmm", tool_calls: [call("call_a0", "calculate", '{"expr": 1}'), call("call_a1", "calculate", "12*(")] })
    expect(later.filter((m: any) => m.role === "tool")).toEqual([
      { role: "tool", tool_call_id: "call_a0", content: 'error: arguments must be JSON like {"expression": "2+3"}' },
      { role: "tool", tool_call_id: "call_a1", content: 'error: arguments must be JSON like {"expression": "2+3"}' },
      { role: "tool", tool_call_id: "call_b0", content: 'error: unknown tool "search", use calculate' },
      { role: "tool", tool_call_id: "call_b1", content: "12" }
    ])
  })

  it("stops after the turn limit with an empty answer, still exit 0 (a wrong answer, not a crash)", async () => {
    const server = await scriptedServer((i) => completion({ content: null, tool_calls: [call(`call_${i}`, "calculate", '{"expression":"1+1"}')] }))
    const noNumber = await scriptedServer(() => completion({ content: "I cannot say." }))
    const [run, said] = await Promise.all([
      runNode([HARNESS], { OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "k", REINS_TASK: JSON.stringify({ question: "1+1" }), CALC_MAX_TURNS: "2" }),
      runNode([HARNESS, "2+2"], { OPENAI_BASE_URL: noNumber.url, OPENAI_API_KEY: "k" })
    ])
    expect([run.code, lastLine(run.stdout)]).toEqual([0, "ANSWER:"])
    expect(server.chats()).toHaveLength(2)
    expect([said.code, lastLine(said.stdout)]).toEqual([0, "ANSWER: I cannot say."])
  })

  it("ends the episode with an empty answer when the conversation outgrows the model's context", async () => {
    const server = await scriptedServer((i) =>
      i === 0
        ? completion({ content: null, tool_calls: [call("call_0", "calculate", '{"expression":"1+1"}')] })
        : { status: 400, body: { error: { message: "context too long", type: "invalid_request_error", code: "context_length_exceeded", param: null } } }
    )
    const run = await runNode([HARNESS, "1+1"], { OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "k" })
    expect([run.code, lastLine(run.stdout)]).toEqual([0, "ANSWER:"])
    expect(server.chats()).toHaveLength(2)
  })

  it("exits non-zero with a clear message on server errors and bad tasks", async () => {
    const server = await scriptedServer(() => ({ status: 404, body: { error: { message: "no such model", type: "invalid_request_error", code: "model_not_found", param: "model" } } }))
    const env = { OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "k" }
    const [failed, noTask, noQuestion, badSetting, badTurns] = await Promise.all([
      runNode([HARNESS, "1+1"], env),
      runNode([HARNESS], env),
      runNode([HARNESS], { ...env, REINS_TASK: '{"q": 1}' }),
      runNode([HARNESS, "1+1"], { ...env, CALC_TEMPERATURE: "hot" }),
      runNode([HARNESS, "1+1"], { ...env, CALC_MAX_TURNS: "2.5" })
    ])
    expect([failed.code, failed.stdout]).toEqual([1, ""])
    expect(failed.stderr).toContain("server error: 404 no such model")
    expect([noTask.code, noTask.stdout]).toEqual([2, ""])
    expect(noTask.stderr).toContain("no task")
    expect([noQuestion.code, noQuestion.stdout]).toEqual([2, ""])
    expect(noQuestion.stderr).toContain("task has no question")
    expect([badSetting.code, badSetting.stdout]).toEqual([2, ""])
    expect(badSetting.stderr).toContain("CALC_TEMPERATURE must be a non-negative number")
    expect([badTurns.code, badTurns.stdout]).toEqual([2, ""])
    expect(badTurns.stderr).toContain('CALC_MAX_TURNS must be a non-negative integer, got "2.5"')
    // none of them reached the model
    expect(server.chats()).toHaveLength(1)
  })
})
