/**
 * Anthropic Messages from the policy engine, with the official `@anthropic-ai/sdk` as the client:
 * plain replies, a tool loop whose `tool_use` / `tool_result` blocks are sent back (the recorded
 * calls form one exact token prefix chain, matched by `tool_use_id`), the stream events in order,
 * `countTokens` (the length the next call's prompt has), stop sequences and max_tokens, and every
 * refusal in Anthropic's error shape.
 */
import Anthropic from "@anthropic-ai/sdk"
import { describe, expect, it } from "vitest"
import { callsOf as recordedCalls, isPrefix, type Running } from "./harness.js"
import { serveTinyPolicy, type TinyPolicy, WEATHER } from "./policy.js"

const inputSchema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
const tools: Array<Anthropic.Tool> = [{ name: "get_weather", description: "Weather of a city", input_schema: inputSchema as Anthropic.Tool.InputSchema }]
const chatTools = [{ type: "function" as const, function: { name: "get_weather", description: "Weather of a city", parameters: inputSchema } }]
const HELLO = WEATHER.hello
const SYSTEM = WEATHER.system

let policy: TinyPolicy
let gw: Running
let MODEL: string
serveTinyPolicy({ conversations: WEATHER.conversations(chatTools) }, (s) => {
  policy = s.policy
  gw = s.gw
  MODEL = s.policy.modelId
})

/** The SDK as a harness uses it: ANTHROPIC_BASE_URL is the Gateway (without /v1), the attempt key as the API key. */
const callsOf = (rolloutId: string) => recordedCalls(gw, rolloutId)
const client = async () => {
  const a = await gw.attempt()
  return { ...a, anthropic: new Anthropic({ baseURL: gw.url, apiKey: a.key, maxRetries: 0 }) }
}

/**
 * Greedy decoding, so the taught replies come back exactly. The 1.x SDK's types no longer list
 * `temperature` (newer Claude models ignore it), but the wire field is Anthropic's and honoured here.
 */
const greedy = { temperature: 0 } as {}

const weather = (content: Array<Anthropic.MessageParam>) => ({ ...greedy, model: MODEL, max_tokens: 64, system: [{ type: "text" as const, text: SYSTEM, cache_control: { type: "ephemeral" as const } }], tools, messages: content })

describe("Anthropic Messages", () => {
  it("answers in Anthropic's shape, recorded with its exact tokens", async () => {
    const { anthropic, rolloutId } = await client()
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "Hi!" }], metadata: { user_id: "u1" }, ...greedy })
    expect(m).toMatchObject({ type: "message", role: "assistant", model: MODEL, stop_reason: "end_turn", stop_sequence: null, content: [{ type: "text", text: HELLO }] })
    expect(m.id).toMatch(/^msg_/)
    const [call] = await callsOf(rolloutId)
    expect(call).toMatchObject({ endpoint: "messages", protocol: "anthropic", status: 200, trainable: true, finish_reason: "stop" })
    expect(m.usage).toMatchObject({ input_tokens: call.prompt_token_ids.length, output_tokens: call.output_token_ids.length })
    expect(policy.tokenizer.decode(call.output_token_ids)).toBe(HELLO + "<|im_end|>")
    expect(call.output_logprobs).toHaveLength(call.output_token_ids.length)
    for (const lp of call.output_logprobs) expect(lp).toBeGreaterThan(-1)
    expect(call.response).toEqual(JSON.parse(JSON.stringify(m)))
  })

  it("runs a tool loop whose resent blocks extend the recorded ids (matched by tool_use_id), and counts tokens as the call renders them", async () => {
    const { anthropic, rolloutId } = await client()
    const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "What is the weather in Paris?" }]
    const counted = await anthropic.messages.countTokens({ model: MODEL, system: SYSTEM, tools, messages })
    const first = await anthropic.messages.create(weather(messages))
    expect(first.stop_reason).toBe("tool_use")
    const use = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use")!
    expect(use).toMatchObject({ name: "get_weather", input: { city: "Paris" } })
    expect(use.id).toMatch(/^toolu_/)
    messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "sun, 25C" }] }] })
    const countedSecond = await anthropic.messages.countTokens({ model: MODEL, system: SYSTEM, tools, messages })
    const second = await anthropic.messages.create(weather(messages))
    expect(second.content).toEqual([{ type: "text", text: "It is sunny in Paris." }])
    expect(second.stop_reason).toBe("end_turn")
    const calls = await callsOf(rolloutId)
    expect(calls).toHaveLength(2)
    const before = [...calls[0].prompt_token_ids, ...calls[0].output_token_ids]
    expect(isPrefix(before, calls[1].prompt_token_ids)).toBe(true)
    expect(calls[1].reuse).toEqual({ reused_tokens: before.length, from_call_id: calls[0].id, break: null })
    expect([counted.input_tokens, countedSecond.input_tokens]).toEqual(calls.map((c) => c.prompt_token_ids.length))
  })

  it("streams the events in order, and the SDK's stream helper builds the recorded message", async () => {
    const { anthropic, key, rolloutId } = await client()
    // On the wire: every event named, `ping` included (the SDK drops pings).
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "Hi!" }], temperature: 0, stream: true })
    })
    expect(res.headers.get("content-type")).toContain("text/event-stream")
    const wire = (await res.text()).split("\n\n").filter((e) => e !== "").map((e) => {
      const [name, data] = e.split("\n")
      expect(JSON.parse(data!.slice("data: ".length)).type).toBe(name!.slice("event: ".length))
      return name!.slice("event: ".length)
    })
    expect(wire.slice(0, 3)).toEqual(["message_start", "ping", "content_block_start"])
    expect(wire.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"])
    expect(new Set(wire.slice(3, -3))).toEqual(new Set(["content_block_delta"]))

    const events: Array<Anthropic.RawMessageStreamEvent> = []
    for await (const e of await anthropic.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "Hi!" }], stream: true, ...greedy })) events.push(e)
    const text = events.flatMap((e) => (e.type === "content_block_delta" && e.delta.type === "text_delta" ? [e.delta.text] : [])).join("")
    expect(text).toBe(HELLO)

    const stream = anthropic.messages.stream(weather([{ role: "user", content: "What is the weather in Paris?" }]))
    const seen: Array<string> = []
    stream.on("streamEvent", (e) => seen.push(e.type === "content_block_delta" ? `${e.type}:${e.delta.type}` : e.type))
    const final = await stream.finalMessage()
    expect(seen).toEqual(["message_start", "content_block_start", "content_block_delta:input_json_delta", "content_block_stop", "message_delta", "message_stop"])
    expect(final.content).toMatchObject([{ type: "tool_use", name: "get_weather", input: { city: "Paris" } }])
    expect(final.stop_reason).toBe("tool_use")
    const calls = await callsOf(rolloutId)
    // The helper adds its own `parsed_output`; the rest is the message as recorded.
    const { parsed_output: _parsed, ...message } = final as typeof final & { parsed_output?: unknown }
    expect(calls[2].response).toEqual(JSON.parse(JSON.stringify(message)))
    expect(calls[1].output_token_ids.length).toBe(events.flatMap((e) => (e.type === "message_delta" ? [e.usage.output_tokens] : []))[0])
  })

  it("says which stop sequence ended the text, and max_tokens", async () => {
    const { anthropic } = await client()
    const stopped = await anthropic.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: "user", content: "Hi!" }], stop_sequences: [" am", "zz"], ...greedy })
    expect(stopped).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: " am", content: [{ type: "text", text: "Hello there, I" }] })
    const cut = await anthropic.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi!" }], ...greedy })
    expect(cut.stop_reason).toBe("max_tokens")
    expect(cut.usage.output_tokens).toBe(2)
  })

  it("answers every refusal in Anthropic's error shape with its status, and records the calls", async () => {
    const { key, rolloutId } = await client()
    const user = [{ role: "user", content: "Hi!" }]
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ max_tokens: undefined }, "max_tokens"],
      [{ tool_choice: { type: "any" }, tools }, "tool_choice"],
      [{ tool_choice: { type: "tool", name: "get_weather" }, tools }, "tool_choice"],
      [{ tools: [{ type: "web_search_20250305", name: "web_search" }] }, "tools[0].type"],
      [{ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }, "messages[0].content[0].type"],
      [{ messages: [...user, { role: "assistant", content: "Hello" }] }, "messages[1]"],
      [{ messages: [{ role: "system", content: "x" }] }, "messages[0].role"],
      [{ temperature: 1.5 }, "temperature"],
      [{ output_config: { format: { type: "json_schema", schema: {} } } }, "output_config.format"],
      [{ bogus: 1 }, "bogus"]
    ]
    const post = (path: string, body: unknown, headers: Record<string, string>) =>
      fetch(`${gw.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", ...headers }, body: JSON.stringify(body) })
    for (const [extra, field] of cases) {
      const res = await post("/v1/messages", { model: MODEL, max_tokens: 16, messages: user, ...extra }, { "x-api-key": key, "anthropic-beta": "tools-2024-05-16" })
      const json = (await res.json()) as any
      expect(res.status, JSON.stringify(json)).toBe(400)
      expect(Object.keys(json)).toEqual(["type", "error"])
      expect(json.type).toBe("error")
      expect(Object.keys(json.error)).toEqual(["type", "message"])
      expect(json.error.type).toBe("invalid_request_error")
      expect(json.error.message).toContain(field)
    }
    expect((await callsOf(rolloutId)).map((c) => [c.endpoint, c.protocol, c.status])).toEqual(cases.map(() => ["messages", "anthropic", 400]))

    const unknownModel = await post("/v1/messages", { model: "claude-nope", max_tokens: 16, messages: user }, { authorization: `Bearer ${key}` })
    expect(unknownModel.status).toBe(404)
    expect(((await unknownModel.json()) as any).error.type).toBe("not_found_error")
    // Over the context: Anthropic's own words, which Messages harnesses look for.
    const long = await post("/v1/messages", { model: MODEL, max_tokens: 16, messages: [{ role: "user", content: "weather ".repeat(600) }] }, { "x-api-key": key })
    expect(long.status).toBe(400)
    expect(((await long.json()) as any).error).toEqual({ type: "invalid_request_error", message: expect.stringMatching(/^prompt is too long: \d+ tokens > 512 maximum$/) })
    // A Messages route the Gateway does not serve answers in Anthropic's shape too (the SDK reads it).
    const batches = await post("/v1/messages/batches", { requests: [] }, { "x-api-key": key })
    expect(batches.status).toBe(404)
    expect(await batches.json()).toEqual({ type: "error", error: { type: "not_found_error", message: "Invalid URL (POST /v1/messages/batches)" } })
    // The SDK maps the statuses to its error classes.
    const bad = new Anthropic({ baseURL: gw.url, apiKey: "rk-wrong", maxRetries: 0 })
    expect(await bad.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "x" }] }).catch((e) => e)).toBeInstanceOf(Anthropic.AuthenticationError)
    const ok = new Anthropic({ baseURL: gw.url, apiKey: key, maxRetries: 0 })
    const batch = await ok.messages.batches.retrieve("msgbatch_x").catch((e) => e)
    expect(batch).toBeInstanceOf(Anthropic.NotFoundError)
    expect(batch.error).toMatchObject({ type: "error", error: { type: "not_found_error" } })
    const refused = await ok.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "any" } }).catch((e) => e)
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError)
    expect(refused.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } })
  })
})
