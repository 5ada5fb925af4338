#!/usr/bin/env node
/**
 * The calc agent, as deployed: answers one arithmetic question with the help of a
 * `calculate(expression)` tool, talking to any OpenAI-compatible server through the official SDK.
 * It knows nothing about training.
 *
 *   OPENAI_BASE_URL, OPENAI_API_KEY   the server (standard SDK variables)
 *   OPENAI_MODEL                       model id (default: the first one the server lists)
 *   REINS_TASK or argv[2]              the task: {"question": "..."} (or a plain question string)
 *   CALC_TEMPERATURE (1), CALC_MAX_TOKENS (64), CALC_MAX_TURNS (4), CALC_VERBOSE (0)
 *
 * Prints `ANSWER: <answer>` as its last stdout line and exits 0 — also when the model never
 * answered, within the turn limit or before the conversation outgrew the model's context (the
 * server's `context_length_exceeded`): the answer is then empty, a wrong answer, not a crash.
 * Exits 1 when the server fails otherwise, 2 on a bad task or setting.
 */
import OpenAI from "openai"
import { ANSWER_PREFIX, TOOLS, assistantMessage, extractAnswer, firstMessages, runToolCall } from "./agent.mjs"

const fail = (code, message) => {
  process.stderr.write(`calc harness: ${message}\n`)
  process.exit(code)
}

const numberSetting = (name, fallback, integer = false) => {
  const raw = process.env[name]
  if (raw === undefined || raw.trim() === "") return fallback
  const value = Number(raw)
  const kind = integer ? "integer" : "number"
  if (!Number.isFinite(value) || value < 0 || (integer && !Number.isInteger(value))) {
    fail(2, `${name} must be a non-negative ${kind}, got ${JSON.stringify(raw)}`)
  }
  return value
}

/** The question from REINS_TASK (JSON) or argv[2] (JSON or plain text). */
const readQuestion = () => {
  const raw = process.env.REINS_TASK ?? process.argv[2]
  if (raw === undefined) fail(2, "no task: set REINS_TASK to {\"question\": \"...\"} or pass the question as an argument")
  let task = raw
  try {
    task = JSON.parse(raw)
  } catch {
    // a plain question such as `node harness.mjs "3+4"` (3+4 itself is not JSON)
  }
  const question = typeof task === "object" && task !== null ? task.question : task
  if (typeof question === "number") return String(question)
  if (typeof question !== "string" || question.trim() === "") fail(2, `task has no question: ${raw.slice(0, 200)}`)
  return question
}

const log = process.env.CALC_VERBOSE === "1" ? (line) => process.stderr.write(`${line}\n`) : () => {}

/** One model call; a conversation longer than the model's context ends the episode, as in mini-swe. */
const complete = (client, request) =>
  client.chat.completions.create(request).catch((e) => {
    if (e instanceof OpenAI.APIError && e.code === "context_length_exceeded") return "context_full"
    throw e
  })

const main = async () => {
  const question = readQuestion()
  const temperature = numberSetting("CALC_TEMPERATURE", 1)
  const maxTokens = numberSetting("CALC_MAX_TOKENS", 64, true)
  const maxTurns = numberSetting("CALC_MAX_TURNS", 4, true)
  // Local servers (e.g. `reins serve` without a key) accept any key; the SDK insists on one.
  const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY || "none" })
  const model = process.env.OPENAI_MODEL || (await client.models.list()).data[0]?.id
  if (model === undefined) fail(1, "the server lists no model; set OPENAI_MODEL")

  const messages = firstMessages(question)
  for (let turn = 0; turn < maxTurns; turn++) {
    const completion = await complete(client, { model, messages, tools: TOOLS, temperature, max_tokens: maxTokens })
    if (completion === "context_full") {
      log(`the conversation outgrew the model's context after ${turn} turns`)
      return ""
    }
    const reply = completion.choices[0]?.message
    if (reply === undefined) throw new Error("the server returned no choice")
    const calls = (reply.tool_calls ?? []).filter((c) => c.type === "function")
    if (calls.length === 0) {
      log(`final: ${JSON.stringify(reply.content)}`)
      return extractAnswer(reply.content)
    }
    messages.push(assistantMessage(reply.content, calls))
    for (const call of calls) {
      const result = runToolCall(call)
      log(`tool ${call.function?.name}(${call.function?.arguments}) -> ${result}`)
      messages.push({ role: "tool", tool_call_id: call.id, content: result })
    }
  }
  log(`no final answer after ${maxTurns} turns`)
  return ""
}

main().then(
  (answer) => process.stdout.write(`${ANSWER_PREFIX} ${answer}\n`),
  (e) => fail(1, e instanceof OpenAI.APIError ? `server error: ${e.message}` : (e?.stack ?? String(e)))
)
