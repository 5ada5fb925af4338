/**
 * The OpenAI Responses API from the policy engine, with the official `openai` SDK as the client:
 * plain replies, a tool loop sent back as output items (the recorded calls form one exact token
 * prefix chain, matched by `call_id`), the same loop by `previous_response_id`, `GET
 * /v1/responses/{id}`, the semantic stream events in order, incomplete responses, and the
 * refusals in OpenAI's error shape.
 */
import OpenAI from "openai"
import type { FunctionTool, ResponseInputItem, ResponseStreamEvent } from "openai/resources/responses/responses"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { type RecordedResponses, recordedResponses, responsesFold } from "../../packages/gateway/src/responses/conversation.js"
import { callsOf as recordedCalls, isPrefix, type Running } from "./harness.js"
import { serveTinyPolicy, type TinyPolicy, WEATHER } from "./policy.js"

const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
const tools: Array<FunctionTool> = [{ type: "function", name: "get_weather", description: "Weather of a city", parameters, strict: false }]
const chatTools = [{ type: "function" as const, function: { name: "get_weather", description: "Weather of a city", parameters, strict: false } }]
const paris = WEATHER.paris
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

const callsOf = (rolloutId: string) => recordedCalls(gw, rolloutId)
const client = async () => {
  const a = await gw.attempt()
  return { ...a, openai: new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 }) }
}

/** Each call after the first extends the one before it exactly. */
const expectChain = (calls: Array<any>) => {
  expect(calls[0].reuse).toEqual({ reused_tokens: 0, from_call_id: null, break: null })
  for (let i = 1; i < calls.length; i++) {
    const before = [...calls[i - 1].prompt_token_ids, ...calls[i - 1].output_token_ids]
    expect(isPrefix(before, calls[i].prompt_token_ids)).toBe(true)
    expect(calls[i].reuse).toEqual({ reused_tokens: before.length, from_call_id: calls[i - 1].id, break: null })
  }
}

const functionCall = (r: OpenAI.Responses.Response) => {
  const calls = r.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call")
  expect(calls).toHaveLength(1)
  return calls[0]!
}

describe("Responses API", () => {
  it("answers a string input with a message item, recorded with its exact tokens", async () => {
    const { openai, rolloutId } = await client()
    const r = await openai.responses.create({ model: MODEL, input: "Hi!", temperature: 0, metadata: { run: "t1" } })
    expect(r).toMatchObject({ object: "response", status: "completed", model: MODEL, incomplete_details: null, metadata: { run: "t1" } })
    expect(r.id).toMatch(/^resp_/)
    expect(r.output_text).toBe(HELLO)
    expect(r.output).toHaveLength(1)
    expect(r.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: HELLO }] })
    expect(r.output[0]!.id).toMatch(/^msg_/)
    const [call] = await callsOf(rolloutId)
    expect(call).toMatchObject({ endpoint: "responses", protocol: "openai", status: 200, trainable: true, finish_reason: "stop" })
    expect(r.usage).toMatchObject({ input_tokens: call.prompt_token_ids.length, output_tokens: call.output_token_ids.length })
    expect(policy.tokenizer.decode(call.output_token_ids)).toBe(HELLO + "<|im_end|>")
    expect(call.output_logprobs).toHaveLength(call.output_token_ids.length)
    for (const lp of call.output_logprobs) expect(lp).toBeGreaterThan(-1)
    expect(call.response.id).toBe(r.id)
    // The same response, from the store.
    expect(await openai.responses.retrieve(r.id)).toEqual(r)
  })

  it("extends the recorded ids when the output items are sent back (matched by call_id)", async () => {
    const { openai, rolloutId } = await client()
    const input: Array<ResponseInputItem> = [{ role: "user", content: "What is the weather in Paris?" }]
    const first = await openai.responses.create({ model: MODEL, instructions: SYSTEM, input, tools, temperature: 0 })
    const call = functionCall(first)
    expect(call).toMatchObject({ name: "get_weather", status: "completed" })
    expect(JSON.parse(call.arguments)).toEqual({ city: "Paris" })
    expect(call.call_id).toMatch(/^call_/)
    expect(call.id).toMatch(/^fc_/)
    input.push(...(first.output as Array<ResponseInputItem>), { type: "function_call_output", call_id: call.call_id, output: "sun, 25C" })
    const second = await openai.responses.create({ model: MODEL, instructions: SYSTEM, input, tools, temperature: 0 })
    expect(second.output_text).toBe("It is sunny in Paris.")
    const calls = await callsOf(rolloutId)
    expect(calls.map((c) => c.finish_reason)).toEqual(["tool_calls", "stop"])
    expectChain(calls)
    expect(second.usage!.input_tokens_details.cached_tokens).toBe(calls[1].reuse.reused_tokens)
  })

  it("continues a conversation by previous_response_id with only the new input", async () => {
    const { openai, rolloutId } = await client()
    const first = await openai.responses.create({ model: MODEL, instructions: SYSTEM, input: "What is the weather in Paris?", tools, temperature: 0 })
    const call = functionCall(first)
    const second = await openai.responses.create({
      model: MODEL,
      instructions: SYSTEM,
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "sun, 25C" }],
      tools,
      temperature: 0
    })
    expect(second.output_text).toBe("It is sunny in Paris.")
    expect(second.previous_response_id).toBe(first.id)
    const calls = await callsOf(rolloutId)
    expectChain(calls)
    // Another attempt's key cannot continue it or read it.
    const other = await client()
    const refused = await other.openai.responses.create({ model: MODEL, previous_response_id: first.id, input: "x" }).catch((e) => e)
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError)
    expect(refused.param).toBe("previous_response_id")
    expect(await other.openai.responses.retrieve(first.id).catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError)
    expect((await callsOf(other.rolloutId)).map((c) => c.status)).toEqual([400])
    // The Gateway keeps an attempt's responses folded call by call; folded that way (a turn, then
    // the next) they are what the store's calls give when read afresh, after a restart say.
    const attemptId = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.attempts[0].id
    const all = await Effect.runPromise(gw.store.calls(attemptId))
    const fold = responsesFold()
    for (const call of [all[0]!, all[0]!, all[1]!, all[0]!]) fold.add(call) // earlier calls again are skipped
    expect(await Effect.runPromise(gw.store.calls(attemptId, all[0]!.seq))).toEqual([all[1]])
    const fresh = recordedResponses(all)
    expect([...fold.recorded.byId.keys()]).toEqual([first.id, second.id])
    const view = (r: RecordedResponses) => [...r.byId.values()].map((x) => [x.conversation.messages, x.reply, x.stored, x.body])
    expect(view(fold.recorded)).toEqual(view(fresh))
    expect((await openai.responses.retrieve(second.id)).output_text).toBe("It is sunny in Paris.")
  })

  it("resolves item_reference to this attempt's stored output items; store: false keeps a response out of reach", async () => {
    const { openai, rolloutId } = await client()
    const question: ResponseInputItem = { role: "user", content: "What is the weather in Paris?" }
    const first = await openai.responses.create({ model: MODEL, instructions: SYSTEM, input: [question], tools, temperature: 0 })
    const call = functionCall(first)
    // As the AI SDK sends stored items back: by reference.
    const second = await openai.responses.create({
      model: MODEL,
      instructions: SYSTEM,
      input: [question, { type: "item_reference", id: call.id! }, { type: "function_call_output", call_id: call.call_id, output: "sun, 25C" }],
      tools,
      temperature: 0
    })
    expect(second.output_text).toBe("It is sunny in Paris.")
    expectChain(await callsOf(rolloutId))

    const unstored = await openai.responses.create({ model: MODEL, instructions: SYSTEM, input: [question], tools, temperature: 0, store: false })
    expect((unstored as { store?: boolean }).store).toBe(false)
    expect(await openai.responses.retrieve(unstored.id).catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError)
    const chained = await openai.responses.create({ model: MODEL, previous_response_id: unstored.id, input: "x" }).catch((e) => e)
    expect(chained).toMatchObject({ status: 400, param: "previous_response_id" })
    const referenced = await openai.responses.create({ model: MODEL, input: [question, { type: "item_reference", id: functionCall(unstored).id! }] }).catch((e) => e)
    expect(referenced).toMatchObject({ status: 400, param: "input[1].id" })
  })

  it("streams the semantic events in order, with sequence numbers, text and function calls", async () => {
    const { openai, rolloutId } = await client()
    const events: Array<ResponseStreamEvent> = []
    for await (const e of await openai.responses.create({ model: MODEL, input: "Hi!", temperature: 0, stream: true })) events.push(e)
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    const types = events.map((e) => e.type)
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"])
    expect(types.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"])
    expect(new Set(types.slice(4, -4))).toEqual(new Set(["response.output_text.delta"]))
    const text = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : [])).join("")
    expect(text).toBe(HELLO)
    const completed = events[events.length - 1] as OpenAI.Responses.ResponseCompletedEvent

    // With a tool: the SDK's stream helper accumulates the same response the store recorded.
    const stream = openai.responses.stream({ model: MODEL, instructions: SYSTEM, input: "What is the weather in Paris?", tools, temperature: 0 })
    const seen: Array<string> = []
    stream.on("event", (e) => seen.push(e.type))
    const final = await stream.finalResponse()
    expect(seen).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed"
    ])
    expect(JSON.parse(functionCall(final).arguments)).toEqual({ city: "Paris" })
    const calls = await callsOf(rolloutId)
    expect(calls[0].response).toEqual(completed.response)
    expect(calls[1].response.output).toEqual(final.output.map((o) => JSON.parse(JSON.stringify(o, (k, v) => (k === "parsed_arguments" ? undefined : v)))))
    expect(policy.tokenizer.decode(calls[1].output_token_ids)).toBe(paris + "<|im_end|>")
  })

  it("answers incomplete when max_output_tokens cuts the reply", async () => {
    const { openai, rolloutId } = await client()
    const r = await openai.responses.create({ model: MODEL, input: "Hi!", temperature: 0, max_output_tokens: 2 })
    expect(r.status).toBe("incomplete")
    expect(r.incomplete_details).toEqual({ reason: "max_output_tokens" })
    expect(r.usage!.output_tokens).toBe(2)
    expect((await callsOf(rolloutId))[0]).toMatchObject({ finish_reason: "length", trainable: true })
  })

  it("refuses what it cannot serve with a 400 naming the field, and records it", async () => {
    const { key, rolloutId } = await client()
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ tools: [{ type: "web_search" }] }, "tools[0].type", "unsupported_value"],
      [{ text: { format: { type: "json_schema", name: "x", schema: {} } } }, "text.format", "unsupported_value"],
      [{ n: 2 }, "n", "unsupported_value"],
      [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }, "input[0].content[0].type", "unsupported_value"],
      [{ tool_choice: "required", tools }, "tool_choice", "unsupported_value"],
      [{ input: [{ type: "item_reference", id: "msg_1" }] }, "input[0].id", "item_not_found"],
      [{ input: [{ type: "computer_call_output", call_id: "c", output: {} }] }, "input[0].type", "unsupported_value"],
      [{ input: [{ type: "function_call_output", output: "x" }] }, "input[0].call_id", "missing_required_parameter"],
      [{ temperatur: 1 }, "temperatur", "unknown_parameter"],
      [{ previous_response_id: "resp_nope" }, "previous_response_id", "previous_response_not_found"]
    ]
    for (const [extra, param, code] of cases) {
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, input: "Hi!", ...extra })
      })
      const json = (await res.json()) as any
      expect(res.status, JSON.stringify(json)).toBe(400)
      expect(Object.keys(json)).toEqual(["error"])
      expect(json.error).toMatchObject({ type: "invalid_request_error", code, param })
    }
    const calls = await callsOf(rolloutId)
    expect(calls.map((c) => [c.endpoint, c.status, c.output_token_ids.length])).toEqual(cases.map(() => ["responses", 400, 0]))
  })
})
