/**
 * `--upstream`: the Gateway proxies to an external OpenAI-compatible server and records every
 * call; token ids and logprobs are taken from the upstream when it returns them.
 */
import { Gateway } from "@reins/gateway"
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { turnsOfCalls } from "../../packages/gateway/src/prompt/Conversations.js"
import { type FakeUpstream, startFakeUpstream } from "./fakeUpstream.js"
import { type Running, startGateway } from "./harness.js"

let upstream: FakeUpstream
let plain: Running
let withIds: Running

beforeAll(async () => {
  upstream = await startFakeUpstream()
  plain = await startGateway(Gateway.upstreamBackend({ url: upstream.url }))
  withIds = await startGateway(Gateway.upstreamBackend({ url: upstream.url.replace(/\/v1$/, ""), tokenIds: true }))
})
afterAll(async () => {
  await plain?.close()
  await withIds?.close()
  await upstream?.close()
})

const client = async (gw: Running) => {
  const a = await gw.attempt()
  return { ...a, openai: new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 }) }
}

describe("upstream proxy", () => {
  it("proxies a chat call and records it as not trainable without token ids", async () => {
    const { openai, attemptId } = await client(plain)
    const r = await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hello" }] })
    expect(r.choices[0]!.message.content).toBe("echo: hello")
    const calls = await Effect.runPromise(plain.gateway.store.calls(attemptId))
    expect(calls).toHaveLength(1)
    expect(calls[0]!.status).toBe(200)
    expect(calls[0]!.trainable).toBe(false)
    expect((calls[0]!.response as any).choices[0].message.content).toBe("echo: hello")
    // The harness's key never reaches the upstream.
    const seen = upstream.requests[upstream.requests.length - 1]!
    expect(seen.headers.authorization).toBeUndefined()
  })

  it("records exact ids and logprobs from an upstream that returns them, without showing unasked logprobs", async () => {
    const { openai, rolloutId } = await client(withIds)
    const r = await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi there" }] })
    expect(r.choices[0]!.message.content).toBe("echo: hi there")
    expect(r.choices[0]!.logprobs ?? null).toBeNull()
    const detail = await withIds.admin(`/api/rollouts/${rolloutId}`)
    const call = detail.json.calls[0]
    expect(call.trainable).toBe(true)
    expect(call.output_token_ids).toEqual(Array.from("echo: hi there", (c) => c.charCodeAt(0)))
    expect(call.output_logprobs).toHaveLength(call.output_token_ids.length)
    expect(call.prompt_token_ids.length).toBeGreaterThan(0)
  })

  it("relays streams with tool calls and records them before the finish chunk", async () => {
    const { openai, rolloutId } = await client(withIds)
    const stream = await openai.chat.completions.create({
      model: "fake-model",
      stream: true,
      stream_options: { include_usage: true },
      tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
      messages: [{ role: "user", content: "what is the weather?" }]
    })
    let name = ""
    let args = ""
    let finish: string | null = null
    let usage = false
    for await (const chunk of stream) {
      const c = chunk.choices[0]
      for (const t of c?.delta.tool_calls ?? []) {
        name += t.function?.name ?? ""
        args += t.function?.arguments ?? ""
      }
      finish = c?.finish_reason ?? finish
      usage ||= chunk.usage != null
    }
    expect({ name, args, finish, usage }).toEqual({ name: "get_weather", args: '{"city":"Paris"}', finish: "tool_calls", usage: true })
    const detail = await withIds.admin(`/api/rollouts/${rolloutId}`)
    const call = detail.json.calls[0]
    expect(call.finish_reason).toBe("tool_calls")
    expect(call.response.choices[0].message.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' })
  })

  it("proxies text completions, streaming and not", async () => {
    const { openai, rolloutId } = await client(plain)
    const r = await openai.completions.create({ model: "fake-model", prompt: "abc" })
    expect(r.choices[0]!.text).toBe("echo: abc")
    let text = ""
    for await (const c of await openai.completions.create({ model: "fake-model", prompt: "xyz", stream: true })) text += c.choices[0]?.text ?? ""
    expect(text).toBe("echo: xyz")
    const detail = await plain.admin(`/api/rollouts/${rolloutId}`)
    expect(detail.json.calls.map((c: any) => [c.endpoint, c.status, c.response.choices[0].text])).toEqual([
      ["completions", 200, "echo: abc"],
      ["completions", 200, "echo: xyz"]
    ])
  })

  it("marks a continued conversation retokenized when the upstream's ids do not extend the earlier call", async () => {
    for (const gw of [plain, withIds]) {
      const { openai, rolloutId } = await client(gw)
      const messages: Array<OpenAI.ChatCompletionMessageParam> = [{ role: "user", content: "first" }]
      const r = await openai.chat.completions.create({ model: "fake-model", messages })
      messages.push(r.choices[0]!.message as OpenAI.ChatCompletionMessageParam, { role: "user", content: "second" })
      await openai.chat.completions.create({ model: "fake-model", messages })
      await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "edited" }, ...messages.slice(1)] })
      const calls = (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls
      expect(calls.map((c: any) => c.reuse.break)).toEqual([null, "retokenized", "history-edited"])
      // The turns rebuilt from the store (after a restart) are the ones the live path kept: one per
      // call, exact only with the upstream's ids.
      const recorded = await Effect.runPromise(gw.gateway.store.calls(calls[0].attempt_id))
      const rebuilt = turnsOfCalls(recorded)
      expect(rebuilt.map((t) => t.callId)).toEqual(calls.map((c: any) => c.id))
      expect(rebuilt.map((t) => t.exact)).toEqual(calls.map(() => gw === withIds))
    }
  })

  it("passes upstream errors through in OpenAI shape and records them", async () => {
    const { openai, rolloutId } = await client(plain)
    const err = await openai.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }).catch((e) => e)
    expect(err).toBeInstanceOf(OpenAI.NotFoundError)
    expect(err.code).toBe("model_not_found")
    const detail = await plain.admin(`/api/rollouts/${rolloutId}`)
    expect(detail.json.calls[0].status).toBe(404)
    expect(detail.json.calls[0].trainable).toBe(false)
    const models = await openai.models.list()
    expect(models.data.map((m) => m.id)).toEqual(["fake-model"])
  })
})
