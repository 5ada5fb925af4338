/**
 * Agent frameworks as deployed, unchanged, against a real Gateway: the OpenAI Agents SDK
 * (`@openai/agents`, Responses API by default) and the AI SDK (`ai` with the default
 * `@ai-sdk/openai` provider, which speaks Responses, and `@ai-sdk/anthropic`, which speaks
 * Messages), each running a tool agent to its answer, streamed and not. Each run's calls are
 * recorded with the exact sampled ids and logprobs, and the second call — the framework
 * resending the history it keeps its own way (re-serialized arguments, system as an input item,
 * tool results as blocks) — extends the first call's exact ids.
 */
import { createAnthropic } from "@ai-sdk/anthropic"
import { createOpenAI } from "@ai-sdk/openai"
import { Agent, OpenAIProvider, Runner, tool as agentTool } from "@openai/agents"
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai"
import OpenAI from "openai"
import { describe, expect, it } from "vitest"
import type { Running } from "./harness.js"
import { type Conversation, serveTinyPolicy, type TinyPolicy } from "./policy.js"

// The anthropic provider warns that it does not know the model's output limit: expected here.
;(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false

const SYSTEM = "You are a weather bot."
const QUESTION = "What is the weather in Paris?"
const ANSWER = "It is sunny in Paris."
const paris = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
/** The Agents SDK sends its JSON-schema tools closed and with `strict` (false here). */
const agentsSchema = { ...schema, additionalProperties: false }

const taught = (tools: Conversation["tools"]): Conversation => ({
  tools,
  steps: [
    { add: [{ role: "system", content: SYSTEM }, { role: "user", content: QUESTION }], reply: paris },
    { add: [{ role: "tool", tool_call_id: "call_0_0", content: "sun, 25C" }], reply: ANSWER }
  ]
})

let policy: TinyPolicy
let gw: Running
let MODEL: string
serveTinyPolicy({
  conversations: [
    taught([{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: agentsSchema, strict: false } }]),
    taught([{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: schema } }])
  ]
}, (s) => {
  policy = s.policy
  gw = s.gw
  MODEL = s.policy.modelId
})

/** Every call recorded with its exact tokens, the second extending the first. */
const expectRecorded = async (rolloutId: string, endpoint: string, protocol: string) => {
  const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls as Array<any>
  expect(calls.map((c) => [c.endpoint, c.protocol, c.status, c.trainable, c.finish_reason])).toEqual([
    [endpoint, protocol, 200, true, "tool_calls"],
    [endpoint, protocol, 200, true, "stop"]
  ])
  expect(policy.tokenizer.decode(calls[0].output_token_ids)).toBe(paris + "<|im_end|>")
  expect(policy.tokenizer.decode(calls[1].output_token_ids)).toBe(ANSWER + "<|im_end|>")
  for (const c of calls) {
    expect(c.output_logprobs).toHaveLength(c.output_token_ids.length)
    for (const lp of c.output_logprobs) expect(lp).toBeGreaterThan(-1)
  }
  const before = [...calls[0].prompt_token_ids, ...calls[0].output_token_ids]
  expect(calls[1].prompt_token_ids.slice(0, before.length)).toEqual(before)
  expect(calls[1].reuse).toEqual({ reused_tokens: before.length, from_call_id: calls[0].id, break: null })
}

describe("agent frameworks, unchanged", () => {
  for (const stream of [false, true]) {
    it(`@openai/agents runs a tool agent over the Responses API${stream ? ", streamed" : ""}`, async () => {
      const a = await gw.attempt()
      const asked: Array<unknown> = []
      const getWeather = agentTool({
        name: "get_weather",
        description: "Weather of a city",
        parameters: agentsSchema as never,
        strict: false,
        execute: async (input: unknown) => {
          asked.push(input)
          return "sun, 25C"
        }
      })
      const agent = new Agent({ name: "weather", instructions: SYSTEM, tools: [getWeather], model: MODEL, modelSettings: { temperature: 0 } })
      const runner = new Runner({
        modelProvider: new OpenAIProvider({ openAIClient: new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 }), useResponses: true }),
        tracingDisabled: true
      })
      if (stream) {
        const result = await runner.run(agent, QUESTION, { stream: true })
        let text = ""
        for await (const e of result.toTextStream()) text += e
        await result.completed
        expect(text).toBe(ANSWER)
        expect(result.finalOutput).toBe(ANSWER)
      } else {
        expect((await runner.run(agent, QUESTION)).finalOutput).toBe(ANSWER)
      }
      expect(asked).toEqual([{ city: "Paris" }])
      await expectRecorded(a.rolloutId, "responses", "openai")
    })
  }

  const aiTools = (asked: Array<unknown>) => ({
    get_weather: tool({
      description: "Weather of a city",
      inputSchema: jsonSchema<{ city: string }>(schema as never),
      execute: async (input) => {
        asked.push(input)
        return "sun, 25C"
      }
    })
  })

  for (const provider of ["openai", "anthropic"] as const) {
    for (const stream of [false, true]) {
      it(`the AI SDK's ${provider} provider runs a tool agent${stream ? ", streamed" : ""}`, async () => {
        const a = await gw.attempt()
        // The providers as configured by OPENAI_BASE_URL / ANTHROPIC_BASE_URL and the key.
        const model = provider === "openai" ? createOpenAI({ baseURL: a.baseUrl, apiKey: a.key })(MODEL) : createAnthropic({ baseURL: a.baseUrl, apiKey: a.key })(MODEL)
        const asked: Array<unknown> = []
        const options = { model, system: SYSTEM, prompt: QUESTION, tools: aiTools(asked), temperature: 0, maxRetries: 0, stopWhen: stepCountIs(3) }
        if (stream) {
          const result = streamText(options)
          let text = ""
          for await (const t of result.textStream) text += t
          expect(text).toBe(ANSWER)
          expect(await result.finishReason).toBe("stop")
        } else {
          const result = await generateText(options)
          expect(result.text).toBe(ANSWER)
          expect(result.steps.map((s) => s.finishReason)).toEqual(["tool-calls", "stop"])
        }
        expect(asked).toEqual([{ city: "Paris" }])
        await expectRecorded(a.rolloutId, provider === "openai" ? "responses" : "messages", provider)
      })
    }
  }
})
