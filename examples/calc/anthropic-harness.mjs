#!/usr/bin/env node
/**
 * The calc agent written against Anthropic's Messages API: the same agent as `harness.mjs` (same
 * system prompt, tool, calculator and answer line, imported from `agent.mjs` so the two cannot
 * drift), talking to any Messages-compatible server through the official `@anthropic-ai/sdk`
 * with a `tool_use` / `tool_result` loop. It knows nothing about training.
 *
 *   ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY   the server (standard SDK variables; the SDK appends /v1/messages)
 *   ANTHROPIC_MODEL                          model id (default: the first one the server lists)
 *   REINS_TASK or argv[2]                    the task: {"question": "..."} (or a plain question string)
 *   CALC_TEMPERATURE (1), CALC_MAX_TOKENS (64), CALC_MAX_TURNS (4), CALC_VERBOSE (0)
 *
 * Prints `ANSWER: <answer>` as its last stdout line and exits 0 — also when the model never
 * answered, within the turn limit or before the conversation outgrew the model's context (a 400
 * saying the prompt is too long): the answer is then empty, a wrong answer, not a crash. Exits 1
 * when the server fails otherwise, 2 on a bad task or setting.
 */
import Anthropic from "@anthropic-ai/sdk"
import { ANSWER_PREFIX, TOOLS, extractAnswer, firstMessages, runToolCall } from "./agent.mjs"
import { harnessIO } from "./settings.mjs"

const { fail, log, readSettings } = harnessIO("calc harness (messages)")

/** The calc tools in Messages' shape: the same name and JSON schema (`input_schema` is chat's `parameters`). */
const MESSAGES_TOOLS = TOOLS.map((t) => ({ name: t.function.name, input_schema: t.function.parameters }))

/** The opening conversation in Messages' shape: the system turn as `system`, the rest as messages. */
const opening = (question) => {
  const messages = firstMessages(question)
  const system = messages.filter((m) => m.role === "system").map((m) => m.content).join("\n\n")
  return { system, messages: messages.filter((m) => m.role !== "system").map((m) => ({ role: m.role, content: m.content })) }
}

/**
 * A conversation longer than the model's context: Anthropic (and the reins Gateway) answer 400
 * "prompt is too long" or, counting max_tokens, "input length and `max_tokens` exceed context limit".
 */
const isContextFull = (e) =>
  e instanceof Anthropic.APIError && e.status === 400 && /prompt is too long|exceed context limit/i.test(e.apiMessage ?? e.message)

/** One model call; a conversation longer than the model's context ends the episode, as in harness.mjs. */
const create = (client, request) =>
  client.messages.create(request).catch((e) => {
    if (isContextFull(e)) return "context_full"
    throw e
  })

/** A `tool_use` block as the chat-shaped call `runToolCall` reads (its input object as JSON arguments). */
const asToolCall = (use) => ({ id: use.id, type: "function", function: { name: use.name, arguments: JSON.stringify(use.input ?? null) } })

const main = async () => {
  const { question, temperature, maxTokens, maxTurns } = readSettings()
  // Local servers (e.g. `reins serve` without a key) accept any key; the SDK insists on one.
  const client = new Anthropic({ apiKey: process.env.ANTHROPIC_API_KEY || "none" })
  const model = process.env.ANTHROPIC_MODEL || (await client.models.list()).data[0]?.id
  if (model === undefined) fail(1, "the server lists no model; set ANTHROPIC_MODEL")

  const { system, messages } = opening(question)
  for (let turn = 0; turn < maxTurns; turn++) {
    const reply = await create(client, { model, system, messages, tools: MESSAGES_TOOLS, temperature, max_tokens: maxTokens })
    if (reply === "context_full") {
      log(`the conversation outgrew the model's context after ${turn} turns`)
      return ""
    }
    const uses = reply.content.filter((b) => b.type === "tool_use")
    const text = reply.content.filter((b) => b.type === "text").map((b) => b.text).join("")
    if (uses.length === 0) {
      log(`final: ${JSON.stringify(text)}`)
      return extractAnswer(text)
    }
    // The assistant turn goes back as the server wrote it; every tool_use gets its tool_result.
    messages.push({ role: "assistant", content: reply.content })
    const results = uses.map((use) => {
      const result = runToolCall(asToolCall(use))
      log(`tool ${use.name}(${JSON.stringify(use.input)}) -> ${result}`)
      return { type: "tool_result", tool_use_id: use.id, content: result }
    })
    messages.push({ role: "user", content: results })
  }
  log(`no final answer after ${maxTurns} turns`)
  return ""
}

main().then(
  (answer) => process.stdout.write(`${ANSWER_PREFIX} ${answer}\n`),
  (e) => fail(1, e instanceof Anthropic.APIError ? `server error: ${e.message}` : (e?.stack ?? String(e)))
)
