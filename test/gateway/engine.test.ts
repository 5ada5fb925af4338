/**
 * Serving from the policy engine with the real `openai` SDK as the client: plain replies, a
 * multi-turn tool loop whose recorded calls form one exact token prefix chain, streaming with
 * and without tools, logprobs, `/v1/completions`, `/v1/models`, and prompt-reuse breaks.
 */
import OpenAI from "openai"
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Running, startGateway } from "./harness.js"
import { makePolicy } from "./policy.js"

/** The model's behaviour in these tests, from the rendered prompt. */
const script = (prompt: string) => {
  const turns = prompt.split("<|im_start|>")
  const last = turns[turns.length - 2] ?? ""
  if (last.startsWith("tool")) return last.includes("rain") ? "It is rainy in London." : "It is sunny in Paris."
  if (prompt.includes("<tools>") && last.startsWith("user") && /weather/i.test(last)) {
    const city = /London/.test(last) ? "London" : "Paris"
    return `<tool_call>{"name": "get_weather", "arguments": {"city": "${city}"}}</tool_call>`
  }
  return "Hello there, I am fine."
}

const policy = makePolicy(script)
let gw: Running
beforeAll(async () => {
  gw = await startGateway(policy.backend)
})
afterAll(async () => {
  await gw?.close()
})

const MODEL = policy.modelId
const tools: Array<ChatCompletionTool> = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }
]

const client = async () => {
  const a = await gw.attempt()
  return { ...a, openai: new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 }) }
}

const isPrefix = (prefix: ReadonlyArray<number>, of: ReadonlyArray<number>) => prefix.length <= of.length && prefix.every((v, i) => of[i] === v)

describe("engine path", () => {
  it("answers a plain chat call in OpenAI's shape with token ids", async () => {
    const { openai, rolloutId } = await client()
    const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "How are you?" }] })
    expect(r.object).toBe("chat.completion")
    expect(r.choices[0]!.message).toMatchObject({ role: "assistant", content: "Hello there, I am fine." })
    expect(r.choices[0]!.finish_reason).toBe("stop")
    const extra = r as unknown as { prompt_token_ids: Array<number>; choices: Array<{ token_ids: Array<number> }> }
    expect(r.usage!.prompt_tokens).toBe(extra.prompt_token_ids.length)
    expect(r.usage!.completion_tokens).toBe(extra.choices[0]!.token_ids.length)
    const detail = await gw.admin(`/api/rollouts/${rolloutId}`)
    const call = detail.json.calls[0]
    expect(call.prompt_token_ids).toEqual(extra.prompt_token_ids)
    expect(call.output_token_ids).toEqual(extra.choices[0]!.token_ids)
    expect(call.output_logprobs).toHaveLength(call.output_token_ids.length)
    expect(call.versions).toHaveLength(call.output_token_ids.length)
    expect(call.trainable).toBe(true)
    expect(call.output_token_ids[call.output_token_ids.length - 1]).toBe(policy.format.tokenizer.eosId)
  })

  it("records a multi-turn tool loop as one exact token prefix chain", async () => {
    const { openai, rolloutId } = await client()
    const messages: Array<ChatCompletionMessageParam> = [
      { role: "system", content: "You are a weather bot." },
      { role: "user", content: "What is the weather in Paris?" }
    ]
    const replies: Array<string | null> = []
    for (const next of ["Thanks! And the weather in London?", "Great, thank you."]) {
      for (let step = 0; step < 4; step++) {
        const r = await openai.chat.completions.create({ model: MODEL, messages, tools })
        const message = r.choices[0]!.message
        replies.push(message.content)
        if (message.tool_calls?.length) {
          expect(r.choices[0]!.finish_reason).toBe("tool_calls")
          // Echo the assistant message back with re-serialized arguments, as some clients do.
          messages.push({
            ...message,
            tool_calls: message.tool_calls.map((c) => (c.type === "function" ? { ...c, function: { ...c.function, arguments: JSON.stringify(JSON.parse(c.function.arguments), null, 2) } } : c))
          } as ChatCompletionMessageParam)
          for (const c of message.tool_calls) {
            const city = c.type === "function" ? (JSON.parse(c.function.arguments) as { city: string }).city : ""
            messages.push({ role: "tool", tool_call_id: c.id, content: city === "London" ? "rain, 12C" : "sun, 25C" })
          }
          continue
        }
        messages.push(message as ChatCompletionMessageParam)
        break
      }
      messages.push({ role: "user", content: next })
    }
    expect(replies).toEqual([null, "It is sunny in Paris.", null, "It is rainy in London."])
    const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
    expect(calls).toHaveLength(4)
    for (let i = 1; i < calls.length; i++) {
      const before = [...calls[i - 1].prompt_token_ids, ...calls[i - 1].output_token_ids]
      expect(isPrefix(before, calls[i].prompt_token_ids)).toBe(true)
      expect(calls[i].reuse).toEqual({ reused_tokens: before.length, from_call_id: calls[i - 1].id, break: null })
    }
    expect(calls[0].reuse).toEqual({ reused_tokens: 0, from_call_id: null, break: null })
  })

  it("classifies the calls that cannot reuse earlier tokens", async () => {
    const { openai, rolloutId } = await client()
    const base: Array<ChatCompletionMessageParam> = [
      { role: "system", content: "You are brief." },
      { role: "user", content: "How are you?" }
    ]
    const first = await openai.chat.completions.create({ model: MODEL, messages: base })
    const history = [...base, first.choices[0]!.message as ChatCompletionMessageParam, { role: "user" as const, content: "And now?" }]
    await openai.chat.completions.create({ model: MODEL, messages: history })
    // The harness edits an earlier user message.
    await openai.chat.completions.create({ model: MODEL, messages: [base[0]!, { role: "user", content: "How do you do?" }, history[2]!, history[3]!] })
    // The harness drops old turns but keeps the system prompt and the recent ones.
    await openai.chat.completions.create({ model: MODEL, messages: [base[0]!, history[3]!] })
    // A retry of the first request reuses its exact prompt.
    await openai.chat.completions.create({ model: MODEL, messages: base })
    const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
    expect(calls.map((c: any) => c.reuse.break)).toEqual([null, null, "history-edited", "truncated", null])
    expect(calls[4].reuse.from_call_id).toBe(calls[0].id)
    expect(calls[4].prompt_token_ids).toEqual(calls[0].prompt_token_ids)
  })

  it("streams like OpenAI, with and without tools", async () => {
    const { openai, rolloutId } = await client()
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi!" }], stream: true, stream_options: { include_usage: true } })
    let text = ""
    let role: string | undefined
    let finish: string | null = null
    let usage: OpenAI.CompletionUsage | undefined
    const tokenIds: Array<number> = []
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk")
      for (const c of chunk.choices) {
        expect(c.index).toBe(0)
        role ??= c.delta.role
        text += c.delta.content ?? ""
        finish = c.finish_reason ?? finish
        tokenIds.push(...((c as unknown as { token_ids?: Array<number> }).token_ids ?? []))
      }
      if (chunk.usage) usage = chunk.usage
    }
    expect({ role, text, finish }).toEqual({ role: "assistant", text: "Hello there, I am fine.", finish: "stop" })
    expect(usage!.completion_tokens).toBe(tokenIds.length)

    const withTools = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Weather in London?" }], tools, stream: true })
    const calls: Record<number, { id?: string; type?: string; name: string; args: string }> = {}
    finish = null
    for await (const chunk of withTools) {
      for (const t of chunk.choices[0]?.delta.tool_calls ?? []) {
        const c = (calls[t.index] ??= { name: "", args: "" })
        c.id ??= t.id
        c.type ??= t.type
        c.name += t.function?.name ?? ""
        c.args += t.function?.arguments ?? ""
      }
      finish = chunk.choices[0]?.finish_reason ?? finish
    }
    expect(finish).toBe("tool_calls")
    expect(Object.values(calls)).toHaveLength(1)
    expect(calls[0]).toMatchObject({ type: "function", name: "get_weather", args: '{"city": "London"}' })
    expect(calls[0]!.id).toMatch(/^call_/)
    const recorded = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
    expect(recorded.map((c: any) => c.finish_reason)).toEqual(["stop", "tool_calls"])
    expect(recorded[0].output_token_ids).toEqual(tokenIds)
    expect(recorded[1].response.choices[0].message.tool_calls[0].id).toBe(calls[0]!.id)
  })

  it("returns logprobs when asked", async () => {
    const { openai } = await client()
    const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }], logprobs: true, top_logprobs: 0 })
    const content = r.choices[0]!.logprobs!.content!
    const ids = (r as unknown as { choices: Array<{ token_ids: Array<number> }> }).choices[0]!.token_ids
    expect(content).toHaveLength(ids.length)
    for (const t of content) {
      expect(typeof t.token).toBe("string")
      expect(t.logprob).toBeLessThanOrEqual(0)
      expect(Array.isArray(t.bytes)).toBe(true)
    }
  })

  it("serves /v1/completions from text and from token ids, streaming too", async () => {
    const { openai, rolloutId } = await client()
    const fromText = await openai.completions.create({ model: MODEL, prompt: "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", max_tokens: 50 })
    expect(fromText.object).toBe("text_completion")
    expect(fromText.choices[0]!.text).toBe("Hello there, I am fine.")
    const ids = Array.from(policy.format.tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", { allowSpecial: true }))
    const fromIds = await openai.completions.create({ model: MODEL, prompt: ids, max_tokens: 3 })
    expect(fromIds.choices[0]!.finish_reason).toBe("length")
    expect(fromIds.usage!.completion_tokens).toBe(3)
    let streamed = ""
    for await (const c of await openai.completions.create({ model: MODEL, prompt: ids, max_tokens: 50, stream: true })) streamed += c.choices[0]?.text ?? ""
    expect(streamed).toBe("Hello there, I am fine.")
    const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
    expect(calls.map((c: any) => c.endpoint)).toEqual(["completions", "completions", "completions"])
    expect(calls[1].prompt_token_ids).toEqual(ids)
  })

  it("lists and describes the served model", async () => {
    const { openai } = await client()
    const list = await openai.models.list()
    expect(list.data.map((m) => m.id)).toEqual([MODEL])
    const m = await openai.models.retrieve(MODEL)
    expect(m).toMatchObject({ id: MODEL, object: "model", owned_by: "reins" })
    const missing = await openai.models.retrieve("nope").catch((e) => e)
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError)
  })
})
