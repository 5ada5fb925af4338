/**
 * The bad-input matrix: every malformed or unsupported request gets an OpenAI-shaped error with
 * the right status and `param`, the server stays up, and nothing wrong is recorded (the calls of
 * the attempt are error rows without tokens).
 */
import { Readable } from "node:stream"
import { isContextFull } from "@reins/protocol"
import { Effect } from "effect"
import OpenAI from "openai"
import { request } from "undici"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Running, startGateway } from "./harness.js"
import { MODEL_ID, tinyPolicy, type TinyPolicy } from "./policy.js"

const LIMIT = 64 * 1024
const model = MODEL_ID
let policy: TinyPolicy
let gw: Running
let key: string
let rolloutId: string
let sent = 0

beforeAll(async () => {
  policy = await tinyPolicy({ contextLength: 512 })
  gw = await startGateway(policy.backend, { maxBodyBytes: LIMIT })
  const a = await gw.attempt()
  key = a.key
  rolloutId = a.rolloutId
})
afterAll(async () => {
  await gw?.close()
  await policy?.close()
})

const send = async (path: string, body: string | Buffer | Readable, headers: Record<string, string> = {}) => {
  sent++
  const r = await request(gw.url + path, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}`, ...headers }, body })
  const text = await r.body.text()
  return { status: r.statusCode, json: JSON.parse(text) as { error: { message: string; type: string; code: string | null; param: string | null } } }
}

const expectError = (r: { status: number; json: any }, status: number, code: string | null, param?: string | null) => {
  expect(r.status, JSON.stringify(r.json)).toBe(status)
  expect(Object.keys(r.json)).toEqual(["error"])
  expect(Object.keys(r.json.error).sort()).toEqual(["code", "message", "param", "type"])
  expect(r.json.error.message.length).toBeGreaterThan(10)
  expect(r.json.error.code).toBe(code)
  if (param !== undefined) expect(r.json.error.param).toBe(param)
}

const user = [{ role: "user", content: "hi" }]
const chat = (extra: Record<string, unknown>) => JSON.stringify({ model, messages: user, ...extra })

describe("bad input matrix (chat)", () => {
  const cases: Array<[string, string, number, string | null, string | null]> = [
    ["malformed JSON", '{"model": "x", "messages": [', 400, "invalid_json", null],
    ["empty body", "", 400, "invalid_json", null],
    ["a JSON array", "[1, 2]", 400, "invalid_type", null],
    ["a JSON string", '"hello"', 400, "invalid_type", null],
    ["no messages", JSON.stringify({ model }), 400, "missing_required_parameter", "messages"],
    ["no model", JSON.stringify({ messages: user }), 400, "missing_required_parameter", "model"],
    ["empty messages", JSON.stringify({ model, messages: [] }), 400, "invalid_value", "messages"],
    ["unknown role", JSON.stringify({ model, messages: [{ role: "wizard", content: "x" }] }), 400, "invalid_value", "messages[0].role"],
    ["message not an object", JSON.stringify({ model, messages: ["hi"] }), 400, "invalid_value", "messages[0]"],
    ["content of wrong type", JSON.stringify({ model, messages: [{ role: "user", content: 42 }] }), 400, "invalid_value", "messages[0].content"],
    ["image content", JSON.stringify({ model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }), 400, "invalid_value", "messages[0].content[0].type"],
    ["tool message without id", JSON.stringify({ model, messages: [{ role: "tool", content: "x" }] }), 400, "missing_required_parameter", "messages[0].tool_call_id"],
    ["assistant without content", JSON.stringify({ model, messages: [{ role: "assistant" }] }), 400, "invalid_value", "messages[0].content"],
    ["unknown field", chat({ temperatur: 1 }), 400, "unknown_parameter", "temperatur"],
    ["temperature as text", chat({ temperature: "hot" }), 400, "invalid_value", "temperature"],
    ["temperature too high", chat({ temperature: 7 }), 400, "invalid_value", "temperature"],
    ["temperature overflowing to Infinity", '{"model":"' + model + '","messages":[{"role":"user","content":"hi"}],"temperature":1e400}', 400, "invalid_value", "temperature"],
    ["top_p above 1", chat({ top_p: 1.5 }), 400, "invalid_value", "top_p"],
    ["negative max_tokens", chat({ max_tokens: -1 }), 400, "invalid_value", "max_tokens"],
    ["fractional max_tokens", chat({ max_tokens: 1.5 }), 400, "invalid_value", "max_tokens"],
    ["huge max_tokens", chat({ max_tokens: 1e300 }), 400, "invalid_value", "max_tokens"],
    ["huge seed", chat({ seed: 1e30 }), 400, "invalid_value", "seed"],
    ["stream as text", chat({ stream: "yes" }), 400, "invalid_value", "stream"],
    ["stream_options without stream", chat({ stream_options: { include_usage: true } }), 400, "invalid_value", "stream_options"],
    ["n > 1", chat({ n: 3 }), 400, "unsupported_value", "n"],
    ["penalties", chat({ presence_penalty: 0.5 }), 400, "unsupported_value", "presence_penalty"],
    ["logit_bias", chat({ logit_bias: { "5": 10 } }), 400, "unsupported_value", "logit_bias"],
    ["json mode", chat({ response_format: { type: "json_object" } }), 400, "unsupported_value", "response_format"],
    ["forced tool", chat({ tool_choice: "required" }), 400, "unsupported_value", "tool_choice"],
    ["top_logprobs without logprobs", chat({ top_logprobs: 3 }), 400, "invalid_value", "top_logprobs"],
    ["too many top_logprobs", chat({ logprobs: true, top_logprobs: 50 }), 400, "invalid_value", "top_logprobs"],
    ["too many stop sequences", chat({ stop: Array.from({ length: 20 }, (_, i) => `s${i}`) }), 400, "invalid_value", "stop"],
    ["bad tool", chat({ tools: [{ type: "function", function: { description: "no name" } }] }), 400, "missing_required_parameter", "tools[0].function.name"],
    ["unknown model", chat({ model: "gpt-17" }), 404, "model_not_found", "model"],
    ["prompt over the context", JSON.stringify({ model, messages: [{ role: "user", content: "weather ".repeat(600) }] }), 400, "context_length_exceeded", "messages"],
    ["max_tokens over the context", chat({ max_tokens: 600 }), 400, "context_length_exceeded", "messages"]
  ]
  for (const [name, body, status, code, param] of cases) {
    it(name, async () => expectError(await send("/v1/chat/completions", body), status, code, param))
  }

  it("invalid UTF-8", async () => {
    const bytes = Buffer.concat([Buffer.from('{"model":"' + model + '","messages":[{"role":"user","content":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')])
    expectError(await send("/v1/chat/completions", bytes), 400, "invalid_encoding", null)
  })

  it("a body over the limit, declared or streamed", async () => {
    const big = chat({ user: "x".repeat(LIMIT + 10) })
    expectError(await send("/v1/chat/completions", big), 413, "request_too_large", null)
    const chunks = function* () {
      for (let i = 0; i < 20; i++) yield Buffer.alloc(8 * 1024, 0x20)
    }
    expectError(await send("/v1/chat/completions", Readable.from(chunks())), 413, "request_too_large", null)
  })
})

describe("bad input matrix (completions)", () => {
  const cases: Array<[string, string, number, string | null, string | null]> = [
    ["no prompt", JSON.stringify({ model }), 400, "missing_required_parameter", "prompt"],
    ["empty token list", JSON.stringify({ model, prompt: [] }), 400, "invalid_value", "prompt"],
    ["token id out of range", JSON.stringify({ model, prompt: [1, 2, 99999] }), 400, "invalid_value", "prompt"],
    ["several prompts", JSON.stringify({ model, prompt: ["a", "b"] }), 400, "unsupported_value", "prompt"],
    ["echo", JSON.stringify({ model, prompt: "a", echo: true }), 400, "unsupported_value", "echo"],
    ["logprobs above 20", JSON.stringify({ model, prompt: "a", logprobs: 21 }), 400, "invalid_value", "logprobs"],
    ["unknown field", JSON.stringify({ model, prompt: "a", messages: [] }), 400, "unknown_parameter", "messages"]
  ]
  for (const [name, body, status, code, param] of cases) {
    it(name, async () => expectError(await send("/v1/completions", body), status, code, param))
  }
})

describe("bodies the store cannot re-serialize", () => {
  it("records a deeply nested body's failed call as it was received, on every protocol", async () => {
    const a = await gw.attempt()
    const deep = "[".repeat(20_000) + "]".repeat(20_000)
    const bodies: Array<[string, string]> = [
      ["/v1/chat/completions", `{"model":"${model}","messages":[{"role":"user","content":${deep}}]}`],
      ["/v1/responses", `{"model":"${model}","input":${deep}}`],
      ["/v1/messages", `{"model":"${model}","max_tokens":4,"messages":[{"role":"user","content":${deep}}]}`]
    ]
    for (const [path, body] of bodies) {
      const r = await request(gw.url + path, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${a.key}` }, body })
      expect(r.statusCode).toBe(400)
      const json = (await r.body.json()) as any
      if (path === "/v1/messages") expect(json.error.type).toBe("invalid_request_error")
      else expect(json.error.code).toBe("invalid_value")
    }
    const calls = await Effect.runPromise(gw.store.calls(a.attemptId))
    expect(calls.map((c) => [c.endpoint, c.status])).toEqual([
      ["chat.completions", 400],
      ["responses", 400],
      ["messages", 400]
    ])
    // The admin view of the rollout still renders.
    const view = await gw.admin(`/api/rollouts/${a.rolloutId}`)
    expect(view.status, JSON.stringify(view.json).slice(0, 300)).toBe(200)
    expect(view.json.calls.map((c: any) => [c.status, c.request, c.unrenderable])).toEqual([400, 400, 400].map((s) => [s, null, ["request"]]))
  })
})

describe("after the matrix", () => {
  it("routes and methods that do not exist answer 404 in OpenAI's shape", async () => {
    for (const [method, path] of [["GET", "/v1/chat/completions"], ["POST", "/v1/embeddings"], ["GET", "/nope"]] as const) {
      const r = await request(gw.url + path, { method, headers: { authorization: `Bearer ${key}` } })
      const json = (await r.body.json()) as any
      expect(r.statusCode).toBe(404)
      expect(json.error.code).toBe("unknown_url")
    }
  })

  it("the server is up, serves normally, and recorded only error rows without tokens", async () => {
    const health = await request(gw.url + "/healthz")
    expect(health.statusCode).toBe(200)
    await health.body.dump()
    const openai = new OpenAI({ baseURL: gw.url + "/v1", apiKey: key, maxRetries: 0 })
    const ok = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 })
    expect(ok.usage!.completion_tokens).toBeGreaterThan(0)
    const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls as Array<any>
    expect(calls).toHaveLength(sent + 1)
    const errors = calls.slice(0, -1)
    for (const c of errors) {
      expect(c.status).toBeGreaterThanOrEqual(400)
      expect(c.trainable).toBe(false)
      expect(c.output_token_ids).toEqual([])
      expect(c.output_logprobs).toEqual([])
      expect(c.response).toBeNull()
      expect(c.error).toMatch(/\w+: /)
    }
    // Run summaries count context-limit refusals apart by reading this recorded form.
    expect(errors.filter(isContextFull)).toHaveLength(2)
    expect(calls[calls.length - 1]).toMatchObject({ status: 200, trainable: true, error: null })
  })
})
