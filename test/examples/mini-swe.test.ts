/**
 * The mini-swe example end to end with real parts: the generator and demo generator as child
 * processes, real `node --test` runs, the verifier on real files, and the harness as a real child
 * process against a scripted OpenAI-compatible HTTP server on loopback.
 */
import { execFile, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { RESULT_PREFIX, runNodeTests, SYSTEM_PROMPT, TOOLS } from "../../examples/mini-swe/agent.mjs"
import { widePool } from "../../examples/mini-swe/tasks.mjs"

// Generous per-test bounds: every test runs real node processes, and on a busy 2-core machine node
// start-up alone can take seconds (idle, the whole file takes well under 30 s).
const SLOW = { timeout: 180_000 }
const DIR = fileURLToPath(new URL("../../examples/mini-swe/", import.meta.url))
const FAMILIES = ["off_by_one", "wrong_cmp", "wrong_arith", "wrong_const", "swapped_args", "missing_return"]

interface Edit {
  readonly path: string
  readonly old: string
  readonly new: string
}
interface TaskLine {
  readonly id: string
  readonly input: { readonly issue: string; readonly files: Record<string, string> }
  readonly split: "train" | "test"
  readonly family: string
  readonly template: string
  readonly held_out_combo: boolean
  readonly hidden_tests: { readonly fn: string; readonly source: string; readonly cases: ReadonlyArray<[string, number]> }
  readonly fix: Edit
  readonly decoy: Edit
}

const tempDirs: Array<string> = []
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "mini-swe-test-"))
  tempDirs.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true })
})

const readJsonl = <A>(path: string): Array<A> =>
  readFileSync(path, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as A)

/** Runs a node script to completion (bounded), with a clean environment (no loaders, no reins variables). */
const runNode = (args: ReadonlyArray<string>, env: Record<string, string> = {}, timeout = 30_000) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [...args], { env: { PATH: process.env.PATH ?? "", ...env }, timeout, maxBuffer: 8 << 20 }, (error, stdout, stderr) =>
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
    )
  })

/** Maps with at most `limit` in flight: a 2-core machine gains nothing from more, and node start-up under load is slow. */
const mapLimit = async <A, B>(items: ReadonlyArray<A>, limit: number, f: (a: A) => Promise<B>): Promise<Array<B>> => {
  const out: Array<B> = []
  for (let i = 0; i < items.length; i += limit) out.push(...(await Promise.all(items.slice(i, i + limit).map(f))))
  return out
}

const applyEdit = (files: Record<string, string>, edit: Edit) => ({ ...files, [edit.path]: files[edit.path]!.replace(edit.old, edit.new) })

/** The verifier's reward for a harness stdout of `RESULT: {"files": files}`. */
const verify = async (task: TaskLine, stdout: string, args: ReadonlyArray<string> = []) => {
  const dir = tempDir()
  writeFileSync(join(dir, "stdout.log"), stdout)
  const out = await runNode([join(DIR, "verify.mjs"), ...args], { REINS_TASK: JSON.stringify(task), REINS_STDOUT_FILE: join(dir, "stdout.log") })
  expect(out.code, out.stderr).toBe(0)
  return out.stdout.trim().split("\n").at(-1)
}
const resultLine = (files: Record<string, string>, finish = "answer") => `some log line\n${RESULT_PREFIX} ${JSON.stringify({ files, turns: 3, finish })}\n`

const train = readJsonl<TaskLine>(join(DIR, "tasks/train.jsonl"))
const test = readJsonl<TaskLine>(join(DIR, "tasks/test.jsonl"))

describe("mini-swe task generator", () => {
  it("is deterministic in its seed and reproduces the shipped files", SLOW, async () => {
    const gen = (split: string, n: number, seed: number, ...more: Array<string>) => runNode([join(DIR, "tasks.mjs"), "--split", split, "--n", String(n), "--seed", String(seed), ...more])
    const [a, b, c, shippedTrain, shippedTest, shippedWide] = await Promise.all([
      gen("train", 40, 5), gen("train", 40, 5), gen("train", 40, 6), gen("train", 1000, 1), gen("test", 100, 2), gen("train", 1000, 71, "--pool", "wide")
    ])
    expect(a.code).toBe(0)
    expect(a.stdout.trim().split("\n")).toHaveLength(40)
    expect(b.stdout).toBe(a.stdout)
    expect(c.stdout).not.toBe(a.stdout)
    expect(shippedTrain.stdout).toBe(readFileSync(join(DIR, "tasks/train.jsonl"), "utf8"))
    expect(shippedTest.stdout).toBe(readFileSync(join(DIR, "tasks/test.jsonl"), "utf8"))
    // the RL run's tasks (reins.config.json)
    expect(shippedWide.stdout).toBe(readFileSync(join(DIR, "tasks/train-wide.jsonl"), "utf8"))
    const bad = await runNode([join(DIR, "tasks.mjs"), "--split", "dev"])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("split must be train or test")
  })

  it("ships a train split and a held-out test split", () => {
    expect(train).toHaveLength(1000)
    expect(test).toHaveLength(100)
    expect(new Set([...train, ...test].map((t) => t.id)).size).toBe(1100)
    expect(train.every((t) => t.split === "train" && !t.held_out_combo)).toBe(true)
    expect(test.every((t) => t.split === "test")).toBe(true)
    // Every family is trained on; the test split adds combinations never seen in training.
    expect(new Set(train.map((t) => t.family))).toEqual(new Set(FAMILIES))
    const trainCombos = new Set(train.map((t) => `${t.template}/${t.family}`))
    const heldOut = test.filter((t) => t.held_out_combo)
    expect(heldOut.length).toBeGreaterThan(5)
    expect(heldOut.every((t) => !trainCombos.has(`${t.template}/${t.family}`))).toBe(true)
    // Function names and the packages themselves never cross the split.
    const trainNames = new Set(train.map((t) => t.hidden_tests.fn))
    expect(test.some((t) => trainNames.has(t.hidden_tests.fn))).toBe(false)
    const trainInputs = new Set(train.map((t) => JSON.stringify(t.input)))
    expect(test.some((t) => trainInputs.has(JSON.stringify(t.input)))).toBe(false)
    // The harness input holds no answer: hidden tests, fix and decoy live outside `input`.
    for (const t of [...train, ...test]) {
      expect(Object.keys(t.input).sort()).toEqual(["files", "issue"])
      expect(Object.keys(t.input.files)).toHaveLength(2)
      expect(t.input.files[t.fix.path]!.split("\n").length).toBeLessThanOrEqual(8)
    }
  })

  it("--pool wide draws many more train names and constants, never the test split's", SLOW, async () => {
    const gen = (...args: Array<string>) => runNode([join(DIR, "tasks.mjs"), ...args])
    const [wide, again] = await Promise.all([gen("--split", "train", "--n", "400", "--seed", "3", "--pool", "wide"), gen("--split", "train", "--n", "400", "--seed", "3", "--pool", "wide")])
    expect(wide.code).toBe(0)
    expect(again.stdout).toBe(wide.stdout)
    const tasks = wide.stdout.trim().split("\n").map((l) => JSON.parse(l) as TaskLine)
    const names = new Set(tasks.map((t) => t.hidden_tests.fn))
    expect(names.size).toBeGreaterThan(300) // the standard train pools hold 144 names in all
    const testNames = new Set(test.map((t) => t.hidden_tests.fn.toLowerCase()))
    expect([...names].some((n) => testNames.has(n.toLowerCase()))).toBe(false)
    // the pool itself: no word and no constant of the test pools
    const pool = widePool(3)
    const testWords = ["fetch", "derive", "solve", "check", "measure", "budget", "height", "speed", "depth", "credit", "margin", "join", "pair", "link"]
    expect([...pool.verbs, ...pool.nouns, ...pool.helpers].some((w) => testWords.includes(w.toLowerCase()))).toBe(false)
    expect(pool.constants.filter((k) => [4, 7, 12, 14].includes(k))).toEqual([])
    expect(pool.constants.length).toBeGreaterThan(20)
    const refused = await gen("--split", "test", "--pool", "wide")
    expect(refused.code).toBe(2)
    expect(refused.stderr).toContain("--pool wide is for the train split only")
  })
})

describe("mini-swe bugs and verifier", () => {
  // One task per family, plus the held-out combinations.
  const picks = [
    ...FAMILIES.map((f) => train.find((t) => t.family === f)!),
    ...[...new Set(test.filter((t) => t.held_out_combo).map((t) => `${t.template}/${t.family}`))].map((c) =>
      test.find((t) => `${t.template}/${t.family}` === c)!
    )
  ]

  it("each family's bug fails its node --test suite and the reference fix passes it", SLOW, async () => {
    const runs = await mapLimit(picks, 4, async (task) => {
      const dir = tempDir()
      const testFile = Object.keys(task.input.files).find((p) => p.endsWith(".test.mjs"))!
      for (const [path, content] of Object.entries(task.input.files)) writeFileSync(join(dir, path), content)
      const buggy = await runNodeTests(dir, [testFile])
      writeFileSync(join(dir, task.fix.path), applyEdit(task.input.files, task.fix)[task.fix.path]!)
      const fixed = await runNodeTests(dir, [testFile])
      return { task, buggy, fixed }
    })
    for (const { task, buggy, fixed } of runs) {
      expect(buggy.failed, `${task.id} ${task.family}: ${buggy.summary}`).toBeGreaterThan(0)
      expect(buggy.summary).toMatch(/^\d passed, \d failed\n/)
      expect(fixed.summary, task.id).toBe(`${fixed.passed} passed, 0 failed`)
      expect(fixed.passed).toBe(2)
    }
  })

  it("the verifier rewards the fix, not the bug, the decoy or rewritten tests", SLOW, async () => {
    // A train task and a held-out one (every family's decoy is checked by the demos test and at generation).
    const rewards = await mapLimit([picks[0]!, picks.at(-1)!], 1, async (task) => {
      const testFile = Object.keys(task.input.files).find((p) => p.endsWith(".test.mjs"))!
      const fixed = applyEdit(task.input.files, task.fix)
      const cheat = { [testFile]: `import test from "node:test";\ntest("ok", () => {});\n` }
      const [fix, bug, decoy, cheated] = await Promise.all([
        verify(task, resultLine({ [task.fix.path]: fixed[task.fix.path]! })),
        verify(task, resultLine({})),
        verify(task, resultLine({ [task.decoy.path]: applyEdit(task.input.files, task.decoy)[task.decoy.path]! })),
        verify(task, resultLine(cheat))
      ])
      return { task, fix, bug, decoy, cheat: cheated }
    })
    for (const r of rewards) expect({ id: r.task.id, fix: r.fix, bug: r.bug, decoy: r.decoy, cheat: r.cheat }).toEqual({ id: r.task.id, fix: "1", bug: "0", decoy: "0", cheat: "0" })
  })

  it("the verifier scores a harness that printed nothing 0 and rejects a task without hidden tests", SLOW, async () => {
    const task = train[0]!
    expect(await verify(task, "crashed before the end\n")).toBe("0")
    const dir = tempDir()
    writeFileSync(join(dir, "stdout.log"), resultLine({}))
    const { hidden_tests: _, ...noHidden } = task
    const out = await runNode([join(DIR, "verify.mjs")], { REINS_TASK: JSON.stringify(noHidden), REINS_STDOUT_FILE: join(dir, "stdout.log") })
    expect(out.code).toBe(2)
    expect(out.stderr).toContain("has no hidden_tests")
  })

  it("--wander-penalty scores a failure that did not end with an answer below one that did, and a fix 1", SLOW, async () => {
    const task = train[0]!
    const fixed = { [task.fix.path]: applyEdit(task.input.files, task.fix)[task.fix.path]! }
    const penalty = ["--wander-penalty", "0.25"]
    const rewards = await mapLimit([
      [resultLine({}, "max_turns"), penalty],
      [resultLine({}, "context_full"), penalty],
      ["crashed before the end\n", penalty],
      [resultLine({}, "answer"), penalty],
      [resultLine(fixed, "max_turns"), penalty],
      [resultLine({}, "max_turns"), []]
    ] as const, 3, ([stdout, args]) => verify(task, stdout, args))
    expect(rewards).toEqual(["-0.25", "-0.25", "-0.25", "0", "1", "0"])
    const dir = tempDir()
    writeFileSync(join(dir, "stdout.log"), resultLine({}))
    for (const bad of ["-1", "2", "lots"]) {
      const out = await runNode([join(DIR, "verify.mjs"), "--wander-penalty", bad], { REINS_TASK: JSON.stringify(task), REINS_STDOUT_FILE: join(dir, "stdout.log") })
      expect(out.code).toBe(2)
      expect(out.stderr).toContain(`--wander-penalty (MINISWE_WANDER_PENALTY) must be a number from 0 to 1, got "${bad}"`)
    }
  })
})

describe("mini-swe demos", () => {
  it("writes a mix of real conversations in the harness's format, most of them wrong", SLOW, async () => {
    const dir = tempDir()
    const tasks = train.slice(0, 10)
    writeFileSync(join(dir, "tasks.jsonl"), tasks.map((t) => JSON.stringify(t)).join("\n"))
    const out = await runNode([join(DIR, "demos.mjs"), "--tasks", join(dir, "tasks.jsonl"), "--n", "10", "--seed", "3", "--out", join(dir, "demos.jsonl")], {}, 60_000)
    expect(out.code, out.stderr).toBe(0)
    expect(out.stdout).toContain("decoy 5, give-up 2, no-tool 1, correct 2")
    const demos = readJsonl<{ messages: Array<any>; tools: unknown }>(join(dir, "demos.jsonl"))
    expect(demos).toHaveLength(10)
    const kinds: Record<string, number> = {}
    for (const { messages, tools } of demos) {
      expect(tools).toEqual(TOOLS)
      expect(messages[0]).toEqual({ role: "system", content: SYSTEM_PROMPT })
      const task = tasks.find((t) => messages[1].content.startsWith(t.input.issue))!
      expect(messages[1]).toEqual({ role: "user", content: `${task.input.issue}\nFiles: ${Object.keys(task.input.files).join(", ")}` })
      // Calls and results alternate, each result answering its call; the last message is a plain answer.
      for (let k = 2; k < messages.length - 1; k += 2) {
        const call = messages[k].tool_calls[0]
        expect(messages[k]).toMatchObject({ role: "assistant", content: null })
        expect(messages[k + 1]).toEqual({ role: "tool", tool_call_id: call.id, content: expect.any(String) })
        if (call.function.name === "read_file") expect(messages[k + 1].content).toBe(task.input.files[task.fix.path])
      }
      expect(messages.at(-1)).toEqual({ role: "assistant", content: expect.any(String) })
      const edit = messages.find((m) => m.tool_calls?.[0].function.name === "replace_in_file")?.tool_calls[0].function.arguments
      const lastResult = messages.filter((m) => m.role === "tool").at(-1)?.content
      const kind = messages.length === 3
        ? "no-tool"
        : edit === undefined
        ? "give-up"
        : edit === JSON.stringify(task.fix)
        ? "correct"
        : edit === JSON.stringify(task.decoy) ? "decoy" : "other"
      if (kind === "correct") expect(lastResult).toMatch(/^2 passed, 0 failed$/)
      if (kind === "decoy" || kind === "give-up") expect(lastResult).toMatch(/^\d passed, [1-9] failed\n/)
      kinds[kind] = (kinds[kind] ?? 0) + 1
    }
    expect(kinds).toEqual({ decoy: 5, "give-up": 2, "no-tool": 1, correct: 2 })
  })
})

// ---------------------------------------------------------------------------------------------
// The harness against a scripted OpenAI-compatible server

interface Scripted {
  readonly url: string
  readonly requests: Array<any>
  readonly close: () => Promise<void>
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = ""
    req.setEncoding("utf8").on("data", (c: string) => (body += c)).on("end", () => resolve(body))
  })

/** An OpenAI error response, e.g. the 400 a server sends when the conversation outgrew the context. */
interface ErrorReply { readonly status: number; readonly error: { message: string; type: string; code: string } }
type Reply = { name: string; arguments: string } | string | ErrorReply

/** Answers the n-th chat completion with `replies[n]`: a tool call `{name, arguments}`, a final text or an error. */
const scriptedServer = async (replies: ReadonlyArray<Reply>): Promise<Scripted> => {
  const requests: Array<any> = []
  const server: Server = createServer(async (req, res) => {
    res.setHeader("content-type", "application/json")
    if (req.method === "GET" && req.url === "/v1/models") {
      return res.end(JSON.stringify({ object: "list", data: [{ id: "scripted-model", object: "model", created: 0, owned_by: "test" }] }))
    }
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
      res.statusCode = 404
      return res.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }))
    }
    const body = JSON.parse(await readBody(req))
    const reply = replies[requests.length] ?? "out of script"
    requests.push(body)
    if (typeof reply === "object" && "status" in reply) {
      res.statusCode = reply.status
      return res.end(JSON.stringify({ error: { ...reply.error, param: "messages" } }))
    }
    const message = typeof reply === "string"
      ? { role: "assistant", content: reply }
      : { role: "assistant", content: null, tool_calls: [{ id: `call_${requests.length}`, type: "function", function: reply }] }
    res.end(JSON.stringify({
      id: `chatcmpl-${requests.length}`,
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [{ index: 0, message, finish_reason: typeof reply === "string" ? "stop" : "tool_calls", logprobs: null }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }
    }))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/** The harness as a child process; killed if it outlives the test. */
const runHarness = (server: Scripted, task: TaskLine, env: Record<string, string> = {}) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [join(DIR, "harness.mjs")], {
      env: { PATH: process.env.PATH ?? "", OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "attempt-key", REINS_TASK: JSON.stringify(task.input), ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c))
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c))
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000)
    child.on("close", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })

const lastResult = (stdout: string) => {
  const line = stdout.trim().split("\n").at(-1)!
  expect(line.startsWith(`${RESULT_PREFIX} `)).toBe(true)
  return JSON.parse(line.slice(RESULT_PREFIX.length))
}

describe("mini-swe harness", () => {
  const task = train.find((t) => t.family === "off_by_one")!

  it("reads, fixes and tests through the OpenAI API, and the verifier gives 1", SLOW, async () => {
    const server = await scriptedServer([
      { name: "read_file", arguments: JSON.stringify({ path: task.fix.path }) },
      { name: "replace_in_file", arguments: JSON.stringify(task.fix) },
      { name: "run_tests", arguments: "{}" },
      "Fixed."
    ])
    try {
      const out = await runHarness(server, task)
      expect(out.code, out.stderr).toBe(0)
      const fixed = applyEdit(task.input.files, task.fix)[task.fix.path]!
      expect(lastResult(out.stdout)).toEqual({ files: { [task.fix.path]: fixed }, turns: 4, finish: "answer" })

      const rs = server.requests
      expect(rs).toHaveLength(4)
      for (const r of rs) expect(r).toMatchObject({ model: "scripted-model", tools: TOOLS, temperature: 1 })
      expect(rs[0].messages).toEqual([
        { role: "system", content: SYSTEM_PROMPT },
        { role: "user", content: `${task.input.issue}\nFiles: ${Object.keys(task.input.files).join(", ")}` }
      ])
      // Each call extends the previous one: the assistant turn as received, then the tool's real answer.
      const last = rs[3].messages
      expect(last.slice(0, rs[2].messages.length)).toEqual(rs[2].messages)
      expect(last.slice(2)).toEqual([
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: task.fix.path }) } }] },
        { role: "tool", tool_call_id: "call_1", content: task.input.files[task.fix.path] },
        { role: "assistant", content: null, tool_calls: [{ id: "call_2", type: "function", function: { name: "replace_in_file", arguments: JSON.stringify(task.fix) } }] },
        { role: "tool", tool_call_id: "call_2", content: "ok" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_3", type: "function", function: { name: "run_tests", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_3", content: "2 passed, 0 failed" }
      ])
      expect(await verify(task, out.stdout)).toBe("1")
    } finally {
      await server.close()
    }
  })

  it("answers bad tool calls with error texts, never crashes, and stops after max turns", SLOW, async () => {
    const server = await scriptedServer([
      { name: "read_file", arguments: "{not json" },
      { name: "rm_rf", arguments: "{}" },
      { name: "read_file", arguments: JSON.stringify({ path: "../../etc/passwd" }) },
      { name: "replace_in_file", arguments: JSON.stringify({ path: task.fix.path, old: "no such text", new: "x" }) },
      { name: "replace_in_file", arguments: JSON.stringify({ path: task.fix.path, old: 5 }) },
      { name: "run_tests", arguments: "{}" }
    ])
    try {
      const out = await runHarness(server, task, { MINISWE_TEMPERATURE: "0", MINISWE_MAX_TURNS: "6" })
      expect(out.code, out.stderr).toBe(0)
      expect(lastResult(out.stdout)).toEqual({ files: {}, turns: 6, finish: "max_turns" })
      expect(server.requests).toHaveLength(6)
      expect(server.requests[0].temperature).toBe(0)
      const results = server.requests[5].messages.filter((m: any) => m.role === "tool").map((m: any) => m.content)
      expect(results).toEqual([
        "error: arguments must be a JSON object",
        `error: unknown tool "rm_rf"; tools: read_file, run_tests, replace_in_file`,
        `error: no file "../../etc/passwd"; files: ${Object.keys(task.input.files).join(", ")}`,
        `error: old text not found in ${task.fix.path}`,
        "error: old must be a non-empty string and new a string"
      ])
      expect(await verify(task, out.stdout)).toBe("0")
    } finally {
      await server.close()
    }
  })

  it("ends with its edits when the conversation outgrows the model's context (a result, not a crash)", SLOW, async () => {
    const server = await scriptedServer([
      { name: "read_file", arguments: JSON.stringify({ path: task.fix.path }) },
      { name: "replace_in_file", arguments: JSON.stringify(task.fix) },
      { status: 400, error: { message: "This model's maximum context length is 640 tokens.", type: "invalid_request_error", code: "context_length_exceeded" } }
    ])
    try {
      const out = await runHarness(server, task)
      expect(out.code, out.stderr).toBe(0)
      const fixed = applyEdit(task.input.files, task.fix)[task.fix.path]!
      expect(lastResult(out.stdout)).toEqual({ files: { [task.fix.path]: fixed }, turns: 2, finish: "context_full" })
      expect(server.requests).toHaveLength(3)
      expect(await verify(task, out.stdout)).toBe("1")
    } finally {
      await server.close()
    }
  })

  it("exits 1 with a clear message when the server fails, and 2 on a bad task", SLOW, async () => {
    const server = await scriptedServer([])
    await server.close() // nothing listens there any more
    const down = await runHarness(server, task, { OPENAI_MODEL: "m" })
    expect(down.code).toBe(1)
    expect(down.stderr).toContain("mini-swe harness: server error")
    const bad = await runHarness(server, { ...task, input: { issue: "x", files: { "../evil.mjs": "" } } })
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("unsafe file path")
  })
})
