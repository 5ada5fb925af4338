/**
 * `--upstream` for the Responses API and Anthropic Messages: the Gateway relays each to an
 * upstream that speaks it and records every call before the answer. The upstream here is a real
 * server of both protocols — another reins Gateway, serving a tiny policy — reached over loopback
 * with the official SDKs as the harness.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Gateway } from "@reins/gateway"
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Running, startGateway } from "./harness.js"
import { tinyPolicy, type TinyPolicy } from "./policy.js"

let policy: TinyPolicy
let inner: Running
let innerAttempt: Awaited<ReturnType<Running["attempt"]>>
let front: Running
beforeAll(async () => {
  // No stop ids: every generation runs to its max tokens, so the answers' status and stop reason
  // do not depend on what was sampled (a random tiny policy samples its end-of-turn token within
  // five tokens now and then).
  policy = await tinyPolicy({ stopIds: [] })
  inner = await startGateway(policy.backend)
  innerAttempt = await inner.attempt()
  // The front Gateway reaches the upstream with its own key: here, an attempt key of the inner one.
  front = await startGateway(Gateway.upstreamBackend({ url: inner.url, apiKey: innerAttempt.key }))
}, 120_000)
afterAll(async () => {
  await front?.close()
  await inner?.close()
  await policy?.close()
})

const frontCalls = async (attemptId: string) => Effect.runPromise(front.store.calls(attemptId))
const innerCalls = async () => Effect.runPromise(inner.store.calls(innerAttempt.attemptId))

describe("upstream relay of the Responses API and Messages", () => {
  it("relays Responses calls, streamed and not, recording each before the answer", async () => {
    const a = await front.attempt()
    const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
    const whole = await openai.responses.create({ model: policy.modelId, input: "Hi!", max_output_tokens: 5 })
    expect(whole).toMatchObject({ object: "response", status: "incomplete", usage: { output_tokens: 5 } })
    const events: Array<string> = []
    let completed: OpenAI.Responses.Response | undefined
    for await (const e of await openai.responses.create({ model: policy.modelId, input: "Hello", max_output_tokens: 4, stream: true })) {
      events.push(e.type)
      if (e.type === "response.incomplete") completed = e.response
    }
    expect(events.slice(0, 2)).toEqual(["response.created", "response.in_progress"])
    expect(events[events.length - 1]).toBe("response.incomplete")
    const calls = await frontCalls(a.attemptId)
    expect(calls.map((c) => [c.endpoint, c.protocol, c.status, c.trainable, c.finishReason])).toEqual([
      ["responses", "openai", 200, false, "length"],
      ["responses", "openai", 200, false, "length"]
    ])
    expect(calls[0]!.response).toEqual(JSON.parse(JSON.stringify(whole, (k, v) => (k === "output_text" ? undefined : v))))
    expect(calls[1]!.response).toEqual(completed)
    // The upstream served (and recorded) the same responses, with the policy's exact tokens.
    const upstream = (await innerCalls()).filter((c) => c.endpoint === "responses")
    expect(upstream.map((c) => (c.response as { id: string }).id)).toEqual([whole.id, completed!.id])
    expect(upstream.every((c) => c.trainable && c.outputIds.length > 0)).toBe(true)
  })

  it("relays Messages calls, streamed and not, passing the version header and the upstream's own errors", async () => {
    const a = await front.attempt()
    const anthropic = new Anthropic({ baseURL: front.url, apiKey: a.key, maxRetries: 0 })
    const whole = await anthropic.messages.create({ model: policy.modelId, max_tokens: 5, messages: [{ role: "user", content: "Hi!" }] })
    expect(whole).toMatchObject({ type: "message", stop_reason: "max_tokens", usage: { output_tokens: 5 } })
    const streamed = await anthropic.messages.stream({ model: policy.modelId, max_tokens: 4, messages: [{ role: "user", content: "Hello" }] }).finalMessage()
    expect(streamed.stop_reason).toBe("max_tokens")
    const refused = await anthropic.messages.create({ model: "claude-nope", max_tokens: 5, messages: [{ role: "user", content: "x" }] }).catch((e) => e)
    expect(refused).toBeInstanceOf(Anthropic.NotFoundError)
    expect(refused.error).toMatchObject({ type: "error", error: { type: "not_found_error" } })
    const calls = await frontCalls(a.attemptId)
    expect(calls.map((c) => [c.endpoint, c.protocol, c.status, c.trainable, c.finishReason])).toEqual([
      ["messages", "anthropic", 200, false, "length"],
      ["messages", "anthropic", 200, false, "length"],
      ["messages", "anthropic", 404, false, null]
    ])
    expect(calls[0]!.response).toEqual(JSON.parse(JSON.stringify(whole)))
    // The message the stream built is the one recorded.
    const { parsed_output: _parsed, ...message } = streamed as typeof streamed & { parsed_output?: unknown }
    expect(calls[1]!.response).toEqual(JSON.parse(JSON.stringify(message)))
    const upstream = (await innerCalls()).filter((c) => c.endpoint === "messages")
    expect(upstream.map((c) => [c.status, (c.response as { id?: string } | null)?.id ?? null])).toEqual([
      [200, whole.id],
      [200, streamed.id],
      [404, null]
    ])
  })
})
