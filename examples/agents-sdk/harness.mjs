#!/usr/bin/env node
/**
 * The calc agent as an ordinary OpenAI Agents SDK program: an `Agent` with the calc system prompt
 * and one function tool, `calculate(expression)`, run by the SDK's own loop (`run`) against its
 * default model, OpenAI's Responses API (`POST /v1/responses`). It knows nothing about training:
 * pointed at OpenAI it is an OpenAI agent, pointed at the reins Gateway it is trained unchanged.
 *
 *   OPENAI_BASE_URL, OPENAI_API_KEY   the server (standard SDK variables)
 *   OPENAI_MODEL                       model id (default: the first one the server lists)
 *   REINS_TASK or argv[2]              the task: {"question": "..."} (or a plain question string)
 *   CALC_TEMPERATURE (1), CALC_MAX_TOKENS (64), CALC_MAX_TURNS (4), CALC_VERBOSE (0)
 *
 * What the model sees is the calc agent's (examples/calc/agent.mjs): the same system prompt, the
 * same tool schema, the same tool results and error texts, so the two agents never drift and a
 * policy trained through one is the policy of the other.
 *
 * Prints `ANSWER: <answer>` as its last stdout line and exits 0 — also when the model never
 * answered, within the turn limit or before the conversation outgrew the model's context (the
 * server's `context_length_exceeded`): the answer is then empty, a wrong answer, not a crash.
 * Exits 1 when the server fails otherwise, 2 on a bad task or setting.
 */
import { Agent, MaxTurnsExceededError, run, setDefaultOpenAIClient, setTracingDisabled, tool } from "@openai/agents"
import OpenAI from "openai"
import { ANSWER_PREFIX, extractAnswer, runToolCall, SYSTEM_PROMPT, TOOLS } from "../calc/agent.mjs"
import { harnessIO } from "../calc/settings.mjs"

const { fail, log, readSettings } = harnessIO("agents-sdk harness")

/**
 * The SDK exports traces of every run to OpenAI (api.openai.com/v1/traces/ingest) with
 * OPENAI_API_KEY. Against any other server that key is not an OpenAI key — under reins it is the
 * attempt key, which must not leave the cluster, and the export would be refused anyway (or hang
 * on a machine without internet) — so tracing is off unless the server is OpenAI itself.
 * OPENAI_AGENTS_DISABLE_TRACING=1 turns it off against OpenAI too (the SDK reads it itself).
 */
const isOpenAI = (baseUrl) => {
  if (baseUrl === undefined || baseUrl.trim() === "") return true
  try {
    return new URL(baseUrl).hostname === "api.openai.com"
  } catch {
    return false
  }
}

/** calc's tool, as an Agents SDK function tool (calc's plain JSON schema, sent as it is: `strict: false`). */
const calculateTool = (() => {
  const { name, parameters } = TOOLS[0].function
  // calc's handler, given the call as the model wrote it; it never throws.
  const reply = (args) => {
    const result = runToolCall({ function: { name, arguments: args } })
    log(`tool ${name}(${args}) -> ${result}`)
    return result
  }
  return tool({
    name,
    // calc's tool has no description (the name and the parameter say enough); the SDK sends none.
    description: undefined,
    parameters,
    // Strict mode would rewrite the schema (required keys, additionalProperties: false) and
    // change what the model is shown; calc's schema goes out unchanged.
    strict: false,
    execute: (input, _context, details) => reply(details?.toolCall?.arguments ?? JSON.stringify(input)),
    // Arguments that are not JSON never reach `execute`; the model gets calc's error text for them.
    errorFunction: (_context, _error, details) => reply(details?.toolCall?.arguments ?? "")
  })
})()

/** The SDK's run error for a conversation longer than the model's context (the server's 400). */
const isContextFull = (e) => e instanceof OpenAI.APIError && e.code === "context_length_exceeded"

const main = async () => {
  const { question, temperature, maxTokens, maxTurns } = readSettings()
  if (!isOpenAI(process.env.OPENAI_BASE_URL)) setTracingDisabled(true)
  // The SDK's default client reads OPENAI_BASE_URL and OPENAI_API_KEY; one is made here only
  // because local servers (e.g. `reins serve` without a key) accept any key and the SDK insists
  // on one, and so that the model list comes from the same client.
  const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY || "none" })
  setDefaultOpenAIClient(client)
  const model = process.env.OPENAI_MODEL || (await client.models.list()).data[0]?.id
  if (model === undefined) fail(1, "the server lists no model; set OPENAI_MODEL")

  const agent = new Agent({
    name: "calc",
    instructions: SYSTEM_PROMPT,
    tools: [calculateTool],
    model,
    modelSettings: { temperature, maxTokens }
  })
  try {
    const result = await run(agent, question, {
      maxTurns,
      // A call to a tool that does not exist is the model's mistake, told to it as calc tells it.
      toolNotFoundBehavior: "return_error_to_model",
      toolErrorFormatter: ({ kind, toolName }) => (kind === "tool_not_found" ? runToolCall({ function: { name: toolName } }) : undefined)
    })
    log(`final: ${JSON.stringify(result.finalOutput)}`)
    return extractAnswer(result.finalOutput)
  } catch (e) {
    if (e instanceof MaxTurnsExceededError) {
      log(`no final answer after ${maxTurns} turns`)
      return ""
    }
    if (isContextFull(e)) {
      log("the conversation outgrew the model's context")
      return ""
    }
    throw e
  }
}

main().then(
  (answer) => process.stdout.write(`${ANSWER_PREFIX} ${answer}\n`),
  (e) => fail(1, e instanceof OpenAI.APIError ? `server error: ${e.message}` : (e?.stack ?? String(e)))
)
