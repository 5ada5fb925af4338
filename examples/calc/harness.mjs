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
import { harnessIO } from "./settings.mjs"

const { fail, log, readSettings } = harnessIO("calc harness")

/** One model call; a conversation longer than the model's context ends the episode, as in mini-swe. */
const complete = (client, request) =>
  client.chat.completions.create(request).catch((e) => {
    if (e instanceof OpenAI.APIError && e.code === "context_length_exceeded") return "context_full"
    throw e
  })

const main = async () => {
  const { question, temperature, maxTokens, maxTurns } = readSettings()
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
