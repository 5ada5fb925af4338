/**
 * Serving from the policy engine with the real `openai` SDK as the client: plain replies, a
 * multi-turn tool loop whose recorded calls form one exact token prefix chain, streaming with
 * and without tools, logprobs, `/v1/completions`, `/v1/models`, and prompt-reuse breaks.
 */
import { ChatTemplate, DEFAULT_CHAT_TEMPLATE } from "@reins/policy"
import OpenAI from "openai"
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions"
import { describe, expect, it } from "vitest"
import { isPrefix, type Running, startGateway } from "./harness.js"
import { type Conversation, serveTinyPolicy, type TinyPolicy } from "./policy.js"

const tools: Array<ChatCompletionTool> = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }
]
const paris = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
const london = '<tool_call>{"name": "get_weather", "arguments": {"city": "London"}}</tool_call>'
const HELLO = "Hello there, I am fine."

/** What the tiny model is taught before the tests (the harness below replays exactly this). */
const conversations: Array<Conversation> = [
  {
    tools: tools as Conversation["tools"],
    steps: [
      { add: [{ role: "system", content: "You are a weather bot." }, { role: "user", content: "What is the weather in Paris?" }], reply: paris },
      { add: [{ role: "tool", tool_call_id: "call_0_0", content: "sun, 25C" }], reply: "It is sunny in Paris." },
      { add: [{ role: "user", content: "Thanks! And the weather in London?" }], reply: london },
      { add: [{ role: "tool", tool_call_id: "call_2_0", content: "rain, 12C" }], reply: "It is rainy in London." }
    ]
  },
  { tools: tools as Conversation["tools"], steps: [{ add: [{ role: "user", content: "Weather in London?" }], reply: london }] },
  { steps: [{ add: [{ role: "user", content: "Hi!" }], reply: HELLO }] },
  { steps: [{ add: [{ role: "user", content: "hello" }], reply: HELLO }] }
]

let policy: TinyPolicy
let gw: Running
let MODEL: string
serveTinyPolicy({ conversations }, (s) => {
  policy = s.policy
  gw = s.gw
  MODEL = s.policy.modelId
})

const client = async () => {
  const a = await gw.attempt()
  return { ...a, openai: new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 }) }
}


describe("engine path", () => {
  it("answers a plain chat call in OpenAI's shape with token ids", async () => {
    const { openai, rolloutId } = await client()
    const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi!" }], temperature: 0 })
    expect(r.object).toBe("chat.completion")
    expect(r.choices[0]!.message).toMatchObject({ role: "assistant", content: HELLO })
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
        const r = await openai.chat.completions.create({ model: MODEL, messages, tools, temperature: 0 })
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
    // The logprobs are the engine's: the taught replies are near-certain under greedy decoding.
    for (const c of calls) for (const lp of c.output_logprobs) expect(lp).toBeGreaterThan(-1)
  })

  it("classifies the calls that cannot reuse earlier tokens", async () => {
    const { openai, rolloutId } = await client()
    const base: Array<ChatCompletionMessageParam> = [
      { role: "system", content: "You are brief." },
      { role: "user", content: "How are you?" }
    ]
    const short = { model: MODEL, max_tokens: 12 }
    const first = await openai.chat.completions.create({ ...short, messages: base })
    const history = [...base, first.choices[0]!.message as ChatCompletionMessageParam, { role: "user" as const, content: "And now?" }]
    await openai.chat.completions.create({ ...short, messages: history })
    // The harness edits an earlier user message.
    await openai.chat.completions.create({ ...short, messages: [base[0]!, { role: "user", content: "How do you do?" }, history[2]!, history[3]!] })
    // The harness drops old turns but keeps the system prompt and the recent ones.
    await openai.chat.completions.create({ ...short, messages: [base[0]!, history[3]!] })
    // A retry of the first request reuses its exact prompt.
    await openai.chat.completions.create({ ...short, messages: base })
    const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
    expect(calls.map((c: any) => c.reuse.break)).toEqual([null, null, "history-edited", "truncated", null])
    expect(calls[4].reuse.from_call_id).toBe(calls[0].id)
    expect(calls[4].prompt_token_ids).toEqual(calls[0].prompt_token_ids)
  })

  it("classifies a template that rewrites earlier turns as a template break", async () => {
    // Prefix-stable for short conversations (it passes the template's own check), but from the
    // eighth message on it adds a header in front of everything.
    const template = ChatTemplate.fromString("{%- if messages | length > 7 %}[long]{% endif -%}\n" + DEFAULT_CHAT_TEMPLATE)
    const other = await startGateway(policy.backendWith(template))
    try {
      const a = await other.attempt()
      const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
      const messages: Array<ChatCompletionMessageParam> = [{ role: "system", content: "You are brief." }]
      for (let turn = 0; turn < 4; turn++) {
        messages.push({ role: "user", content: `Question ${turn}?` })
        const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4 })
        messages.push(r.choices[0]!.message as ChatCompletionMessageParam)
      }
      const calls = (await other.admin(`/api/rollouts/${a.rolloutId}`)).json.calls
      // Calls 2 and 3 extend exactly; call 4 (8 messages) cannot: the template changed the start.
      expect(calls.map((c: any) => c.reuse.break)).toEqual([null, null, null, "template"])
      expect(calls[3].prompt_token_ids.length).toBeGreaterThan(calls[2].prompt_token_ids.length)
    } finally {
      await other.close()
    }
  })

  it("streams like OpenAI, with and without tools", async () => {
    const { openai, rolloutId } = await client()
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi!" }], temperature: 0, stream: true, stream_options: { include_usage: true } })
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
    expect({ role, text, finish }).toEqual({ role: "assistant", text: HELLO, finish: "stop" })
    expect(usage!.completion_tokens).toBe(tokenIds.length)

    const withTools = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Weather in London?" }], tools, temperature: 0, stream: true })
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
    const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 8, logprobs: true, top_logprobs: 3 })
    const content = r.choices[0]!.logprobs!.content!
    const ids = (r as unknown as { choices: Array<{ token_ids: Array<number> }> }).choices[0]!.token_ids
    expect(content).toHaveLength(ids.length)
    for (const t of content) {
      expect(typeof t.token).toBe("string")
      expect(t.logprob).toBeLessThanOrEqual(0)
      expect(Array.isArray(t.bytes)).toBe(true)
      expect(t.top_logprobs).toHaveLength(3)
      // The alternatives are the k most likely tokens, best first.
      for (let i = 1; i < 3; i++) expect(t.top_logprobs[i]!.logprob).toBeLessThanOrEqual(t.top_logprobs[i - 1]!.logprob)
      expect(t.logprob).toBeLessThanOrEqual(t.top_logprobs[0]!.logprob + 1e-5)
    }
  })

  it("serves /v1/completions from text and from token ids, streaming too", async () => {
    const { openai, rolloutId } = await client()
    const fromText = await openai.completions.create({ model: MODEL, prompt: "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", max_tokens: 50, temperature: 0 })
    expect(fromText.object).toBe("text_completion")
    expect(fromText.choices[0]!.text).toBe(HELLO)
    const ids = Array.from(policy.tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", { allowSpecial: true }))
    const fromIds = await openai.completions.create({ model: MODEL, prompt: ids, max_tokens: 3, temperature: 0 })
    expect(fromIds.choices[0]!.finish_reason).toBe("length")
    expect(fromIds.usage!.completion_tokens).toBe(3)
    let streamed = ""
    for await (const c of await openai.completions.create({ model: MODEL, prompt: ids, max_tokens: 50, temperature: 0, stream: true })) streamed += c.choices[0]?.text ?? ""
    expect(streamed).toBe(HELLO)
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

  it("says in /metrics which backend the policy runs on", async () => {
    const text = await (await fetch(`${gw.url}/metrics`)).text()
    expect(text).toContain('reins_gateway_device_backend{backend="wasm"} 1')
  })
})
