#!/usr/bin/env node
/**
 * The mini-swe agent, as deployed: fixes the bug in a tiny JavaScript package with three tools
 * (read_file, run_tests, replace_in_file), talking to any OpenAI-compatible server through the
 * official SDK. It knows nothing about training.
 *
 *   OPENAI_BASE_URL, OPENAI_API_KEY   the server (standard SDK variables)
 *   OPENAI_MODEL                       model id (default: the first one the server lists)
 *   REINS_TASK or argv[2]              the task input: {"issue": "...", "files": {path: content}}
 *                                      (argv[2] may also be a path to a JSON file)
 *   MINISWE_TEMPERATURE (1; 0 = greedy), MINISWE_MAX_TOKENS (200), MINISWE_MAX_TURNS (8),
 *   MINISWE_TEST_TIMEOUT_MS (20000: generous, a busy trainer machine slows node start-up a lot), MINISWE_VERBOSE (0)
 *
 * It works on a private copy of the package in a temp dir (removed at exit) and prints
 * `RESULT: {"files": {path: content of every changed file}, "turns": N, "finish": "..."}` as its
 * last stdout line — the verifier applies that to a fresh copy. finish is "answer", "max_turns" or
 * "context_full" (the server refused the conversation as longer than the model's context: the
 * episode ends with its edits so far, as a deployed agent's would). Exits 0 whenever the agent ran
 * (a wrong or missing fix is a zero reward, not a crash), 1 when the server fails, 2 on a bad
 * task or setting.
 */
import OpenAI from "openai"
import { existsSync, readFileSync } from "node:fs"
import { RESULT_PREFIX, TOOLS, assistantMessage, firstMessages, openWorkspace, packageFiles, runToolCall } from "./agent.mjs"

const fail = (code, message) => {
  process.stderr.write(`mini-swe harness: ${message}\n`)
  process.exit(code)
}

const numberSetting = (name, fallback) => {
  const raw = process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value < 0) fail(2, `${name} must be a non-negative number, got ${JSON.stringify(raw)}`)
  return value
}

/** The task input from REINS_TASK (JSON) or argv[2] (JSON, or a path to a JSON file). */
const readTask = () => {
  const arg = process.argv[2]
  const raw = process.env.REINS_TASK ?? (arg !== undefined && !arg.trimStart().startsWith("{") && existsSync(arg) ? readFileSync(arg, "utf8") : arg)
  if (raw === undefined) fail(2, "no task: set REINS_TASK to {\"issue\": ..., \"files\": {...}} or pass it as an argument")
  try {
    const task = JSON.parse(raw)
    // A whole task line (with id and input) works too: handy when running by hand.
    const input = task?.input !== undefined && task?.files === undefined ? task.input : task
    packageFiles(input)
    return input
  } catch (e) {
    return fail(2, `bad task: ${e.message}`)
  }
}

const log = process.env.MINISWE_VERBOSE === "1" ? (line) => process.stderr.write(`${line}\n`) : () => {}

/**
 * One model call. A conversation that outgrew the model's context ends the episode the way a
 * deployed agent ends it: with the edits made so far (the verifier judges them), not a crash.
 */
const complete = (client, request) =>
  client.chat.completions.create(request).catch((e) => {
    if (e instanceof OpenAI.APIError && e.code === "context_length_exceeded") return "context_full"
    throw e
  })

const main = async (ws, input, { temperature, maxTokens, maxTurns, timeoutMs }) => {
  // Local servers (e.g. `reins serve` without a key) accept any key; the SDK insists on one.
  const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY || "none" })
  const model = process.env.OPENAI_MODEL || (await client.models.list()).data[0]?.id
  if (model === undefined) throw new Error("the server lists no model; set OPENAI_MODEL")

  const messages = firstMessages(input)
  for (let turn = 1; turn <= maxTurns; turn++) {
    const completion = await complete(client, { model, messages, tools: TOOLS, temperature, max_tokens: maxTokens })
    if (completion === "context_full") {
      log(`context full after ${turn - 1} turns`)
      return { turns: turn - 1, finish: "context_full" }
    }
    const reply = completion.choices[0]?.message
    if (reply === undefined) throw new Error("the server returned no choice")
    const calls = (reply.tool_calls ?? []).filter((c) => c.type === "function" && typeof c.function?.name === "string")
    if (calls.length === 0) {
      log(`final: ${JSON.stringify(reply.content)}`)
      return { turns: turn, finish: "answer" }
    }
    messages.push(assistantMessage(reply.content, calls))
    for (const call of calls) {
      const result = await runToolCall(ws, call, { timeoutMs })
      log(`${call.function?.name}(${call.function?.arguments}) -> ${JSON.stringify(result)}`)
      messages.push({ role: "tool", tool_call_id: call.id, content: result })
    }
  }
  log(`no final answer after ${maxTurns} turns`)
  return { turns: maxTurns, finish: "max_turns" }
}

// Everything that can be refused (exit 2) is checked before the workspace exists.
const input = readTask()
const settings = {
  temperature: numberSetting("MINISWE_TEMPERATURE", 1),
  maxTokens: numberSetting("MINISWE_MAX_TOKENS", 200),
  maxTurns: numberSetting("MINISWE_MAX_TURNS", 8),
  timeoutMs: numberSetting("MINISWE_TEST_TIMEOUT_MS", 20_000)
}
const ws = openWorkspace(packageFiles(input))
// The launcher stops a harness with SIGTERM first: leave no temp dir behind.
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    ws.close()
    process.exit(128 + (signal === "SIGTERM" ? 15 : 2))
  })
}
main(ws, input, settings).then(
  ({ turns, finish }) => {
    process.stdout.write(`${RESULT_PREFIX} ${JSON.stringify({ files: ws.changed(), turns, finish })}\n`)
    ws.close()
  },
  (e) => {
    ws.close()
    fail(1, e instanceof OpenAI.APIError ? `server error: ${e.message}` : (e?.stack ?? String(e)))
  }
)
