/**
 * A Hugging Face model behind the Gateway's one call pipeline: a tiny Qwen3-shaped model with the
 * REAL Qwen3 tokenizer and chat template, the real engine, a real Gateway, and the `openai` SDK as
 * the client running a scripted tool conversation (reason, call `add`, read the result, answer; a
 * new question; again). Qwen3's template keeps a tool loop's reasoning verbatim but drops it once
 * a new user query follows, so:
 *
 * - a call inside a tool loop extends the previous call's exact ids (no break), also when the
 *   client sends the assistant message back without its reasoning (the Gateway restores it);
 * - the call after the new question cannot, and records a `template` break;
 * - reasoning comes back as `reasoning_content` (streamed too), and the recorded ids are exactly
 *   what the engine sampled;
 * - the same script through the Responses API (reasoning items; reuse matched by `call_id`) and
 *   Anthropic Messages (thinking blocks; reuse matched by `tool_use_id`, the model's exact
 *   arguments text restored under a client that sends `input` objects) reuses and breaks alike;
 * - the Trainer's adapter makes two segments of such a rollout, whatever its protocol, the second started by the
 *   `template` break, every sampled token trained once with its recorded logprob, and rollout
 *   normalization weighs the rollout once.
 */
import { HfChatTemplate, HfPromptTemplate, type PromptTemplate, type Tokenizer } from "@reins/policy"
import type { ChatMessage, ChatTool } from "@reins/protocol"
import { adaptRollout, normalize, traceOf, weightByRollout } from "@reins/trainer"
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import OpenAI from "openai"
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Running, startGateway } from "./harness.js"
import { type Example, QWEN3_MODEL_ID, qwen3Policy, type Qwen3Policy } from "./qwen3Policy.js"

const ADD: ChatTool = {
  type: "function",
  function: { name: "add", description: "Add two integers", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] } }
}
const tools = [ADD] as Array<ChatCompletionTool>
const SYSTEM = "You are a calculator."
const QUESTIONS = ["What is 2+3?", "And 4+4?"]

/** The model's four replies, as Qwen3 writes them: a think block, then a Hermes call or the answer. */
const callText = (reason: string, a: number, b: number) =>
  `<think>\n${reason}\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": ${a}, "b": ${b}}}\n</tool_call>`
const answerText = (reason: string, answer: string) => `<think>\n${reason}\n</think>\n\n${answer}`
const SCRIPT = [
  { reasoning: "I should add 2 and 3.", call: [2, 3] as const, text: callText("I should add 2 and 3.", 2, 3) },
  { reasoning: "The tool says 5.", answer: "2+3 = 5.", text: answerText("The tool says 5.", "2+3 = 5.") },
  { reasoning: "Now add 4 and 4.", call: [4, 4] as const, text: callText("Now add 4 and 4.", 4, 4) },
  { reasoning: "The tool says 8.", answer: "4+4 = 8.", text: answerText("The tool says 8.", "4+4 = 8.") }
]

/**
 * What the model is taught: each reply after the prompt of its conversation so far, encoded whole
 * (with each earlier reply's reasoning in its assistant message, where Qwen3's template keeps it).
 */
const examples = (tokenizer: Tokenizer, template: PromptTemplate): Array<Example> => {
  const messages: Array<ChatMessage> = [{ role: "system", content: SYSTEM }, { role: "user", content: QUESTIONS[0]! }]
  const out: Array<Example> = []
  SCRIPT.forEach((step, i) => {
    const prompt = template.encode(tokenizer, messages, { tools: [ADD], addGenerationPrompt: true })
    out.push({ prompt, output: Int32Array.from([...tokenizer.encode(step.text, { allowSpecial: true }), tokenizer.eosId]) })
    if (step.call !== undefined) {
      const args = `{"a": ${step.call[0]}, "b": ${step.call[1]}}`
      messages.push({ role: "assistant", content: null, reasoning_content: step.reasoning, tool_calls: [{ id: `c${i}`, type: "function", function: { name: "add", arguments: args } }] })
      messages.push({ role: "tool", tool_call_id: `c${i}`, content: String(step.call[0] + step.call[1]) })
    } else {
      messages.push({ role: "assistant", content: step.answer, reasoning_content: step.reasoning })
      if (i === 1) messages.push({ role: "user", content: QUESTIONS[1]! })
    }
  })
  return out
}

let policy: Qwen3Policy
let gw: Running
beforeAll(async () => {
  policy = await qwen3Policy(examples)
  gw = await startGateway(policy.backend)
}, 300_000)
afterAll(async () => {
  await gw?.close()
  await policy?.close()
})

interface Reply {
  readonly content: string | null
  readonly reasoning: string | undefined
  readonly toolCalls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>
  /** What the response carried (chat returns them; Responses and Messages do not: null). */
  readonly tokenIds: ReadonlyArray<number> | null
  readonly finish: string | null
}

const whole = async (openai: OpenAI, messages: Array<ChatCompletionMessageParam>): Promise<Reply> => {
  const r = await openai.chat.completions.create({ model: QWEN3_MODEL_ID, messages, tools, temperature: 0 })
  const choice = r.choices[0]!
  const m = choice.message as typeof choice.message & { reasoning_content?: string }
  return {
    content: m.content,
    reasoning: m.reasoning_content,
    toolCalls: (m.tool_calls ?? []).map((c) => (c.type === "function" ? { id: c.id, name: c.function.name, arguments: c.function.arguments } : { id: c.id, name: "", arguments: "" })),
    tokenIds: (choice as unknown as { token_ids: Array<number> }).token_ids,
    finish: choice.finish_reason
  }
}

const streamed = async (openai: OpenAI, messages: Array<ChatCompletionMessageParam>): Promise<Reply> => {
  const stream = await openai.chat.completions.create({ model: QWEN3_MODEL_ID, messages, tools, temperature: 0, stream: true })
  let content = ""
  let reasoning: string | undefined
  const toolCalls: Array<{ id: string; name: string; arguments: string }> = []
  const tokenIds: Array<number> = []
  let finish: string | null = null
  for await (const chunk of stream) {
    const choice = chunk.choices[0]
    if (choice === undefined) continue
    const delta = choice.delta as typeof choice.delta & { reasoning_content?: string }
    tokenIds.push(...((choice as unknown as { token_ids?: Array<number> }).token_ids ?? []))
    if (delta.reasoning_content !== undefined) reasoning = (reasoning ?? "") + delta.reasoning_content
    // Reasoning comes whole before any content.
    if (delta.content) {
      expect(reasoning).toBeDefined()
      content += delta.content
    }
    for (const c of delta.tool_calls ?? []) toolCalls.push({ id: c.id!, name: c.function!.name!, arguments: c.function!.arguments! })
    finish = choice.finish_reason ?? finish
  }
  return { content: content === "" && toolCalls.length > 0 ? null : content, reasoning, toolCalls, tokenIds, finish }
}

/** The scripted harness: ask, run every tool call, answer; then the next question. */
const converse = async (options: { readonly stream: boolean; readonly echoReasoning: boolean }) => {
  const a = await gw.attempt()
  const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
  const messages: Array<ChatCompletionMessageParam> = [{ role: "system", content: SYSTEM }, { role: "user", content: QUESTIONS[0]! }]
  const replies: Array<Reply> = []
  for (const next of [QUESTIONS[1], undefined]) {
    for (let step = 0; step < 3; step++) {
      const reply = options.stream ? await streamed(openai, messages) : await whole(openai, messages)
      replies.push(reply)
      // Most clients keep only content and tool_calls; some send the reasoning back too.
      messages.push({
        role: "assistant",
        content: reply.content,
        ...(reply.toolCalls.length > 0 ? { tool_calls: reply.toolCalls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) } : {}),
        ...(options.echoReasoning ? { reasoning_content: reply.reasoning } : {})
      } as ChatCompletionMessageParam)
      if (reply.toolCalls.length === 0) break
      for (const c of reply.toolCalls) {
        const { a: x, b: y } = JSON.parse(c.arguments) as { a: number; b: number }
        messages.push({ role: "tool", tool_call_id: c.id, content: String(x + y) })
      }
    }
    if (next !== undefined) messages.push({ role: "user", content: next })
  }
  const calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls as Array<any>
  return { ...a, replies, calls }
}

const RESPONSES_TOOLS: Array<OpenAI.Responses.FunctionTool> = [
  { type: "function", name: "add", description: ADD.function.description!, parameters: ADD.function.parameters as Record<string, unknown>, strict: null }
]

const responseReply = (r: OpenAI.Responses.Response): Reply => {
  const calls = r.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call")
  const reasoning = r.output.find((o): o is OpenAI.Responses.ResponseReasoningItem => o.type === "reasoning")
  return {
    content: calls.length > 0 && r.output_text === "" ? null : r.output_text,
    reasoning: reasoning?.content?.map((c) => c.text).join(""),
    toolCalls: calls.map((c) => ({ id: c.call_id, name: c.name, arguments: c.arguments })),
    tokenIds: null,
    finish: calls.length > 0 ? "tool_calls" : "stop"
  }
}

/** The scripted harness over the Responses API: output items sent back as input (reasoning items dropped or kept). */
const converseResponses = async (options: { readonly stream: boolean; readonly echoReasoning: boolean }) => {
  const a = await gw.attempt()
  const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
  const input: Array<OpenAI.Responses.ResponseInputItem> = [{ role: "user", content: QUESTIONS[0]! }]
  const replies: Array<Reply> = []
  for (const next of [QUESTIONS[1], undefined]) {
    for (let step = 0; step < 3; step++) {
      const params = { model: QWEN3_MODEL_ID, instructions: SYSTEM, input, tools: RESPONSES_TOOLS, temperature: 0 }
      const r = options.stream ? await openai.responses.stream(params).finalResponse() : await openai.responses.create(params)
      const reply = responseReply(r)
      replies.push(reply)
      input.push(...(r.output.filter((o) => options.echoReasoning || o.type !== "reasoning") as Array<OpenAI.Responses.ResponseInputItem>))
      if (reply.toolCalls.length === 0) break
      for (const c of reply.toolCalls) {
        const { a: x, b: y } = JSON.parse(c.arguments) as { a: number; b: number }
        input.push({ type: "function_call_output", call_id: c.id, output: String(x + y) })
      }
    }
    if (next !== undefined) input.push({ role: "user", content: next })
  }
  const calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls as Array<any>
  return { ...a, replies, calls }
}

const ANTHROPIC_TOOLS: Array<Anthropic.Tool> = [
  { name: "add", description: ADD.function.description!, input_schema: ADD.function.parameters as Anthropic.Tool.InputSchema }
]

const messageReply = (m: Anthropic.Message): Reply => {
  const uses = m.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use")
  const text = m.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("")
  const thinking = m.content.find((b): b is Anthropic.ThinkingBlock => b.type === "thinking")
  return {
    content: uses.length > 0 && text === "" ? null : text,
    reasoning: thinking?.thinking,
    // The SDK gives the input as an object: its JSON as the client would write it.
    toolCalls: uses.map((u) => ({ id: u.id, name: u.name, arguments: JSON.stringify(u.input) })),
    tokenIds: null,
    finish: m.stop_reason === "tool_use" ? "tool_calls" : m.stop_reason === "end_turn" ? "stop" : m.stop_reason
  }
}

/** The scripted harness over Anthropic Messages: content blocks sent back as they came (thinking kept or dropped). */
const converseMessages = async (options: { readonly stream: boolean; readonly echoReasoning: boolean }) => {
  const a = await gw.attempt()
  const anthropic = new Anthropic({ baseURL: gw.url, apiKey: a.key, maxRetries: 0 })
  const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: QUESTIONS[0]! }]
  const replies: Array<Reply> = []
  for (const next of [QUESTIONS[1], undefined]) {
    for (let step = 0; step < 3; step++) {
      const params = { model: QWEN3_MODEL_ID, max_tokens: 96, system: SYSTEM, messages, tools: ANTHROPIC_TOOLS, temperature: 0 }
      const m = options.stream ? await anthropic.messages.stream(params).finalMessage() : await anthropic.messages.create(params)
      const reply = messageReply(m)
      replies.push(reply)
      messages.push({ role: "assistant", content: m.content.filter((b) => options.echoReasoning || b.type !== "thinking") as Array<Anthropic.ContentBlockParam> })
      if (reply.toolCalls.length === 0) break
      messages.push({
        role: "user",
        content: reply.toolCalls.map((c) => {
          const { a: x, b: y } = JSON.parse(c.arguments) as { a: number; b: number }
          return { type: "tool_result" as const, tool_use_id: c.id, content: String(x + y) }
        })
      })
    }
    if (next !== undefined) messages.push({ role: "user", content: next })
  }
  const calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls as Array<any>
  return { ...a, replies, calls }
}

const startsWith = (ids: ReadonlyArray<number>, prefix: ReadonlyArray<number>) => prefix.length <= ids.length && prefix.every((v, i) => ids[i] === v)

/** What every run of the script must show, streamed or not. */
const checkRun = async (run: Awaited<ReturnType<typeof converse>>) => {
  const { replies, calls } = run
  expect(replies.map((r) => r.reasoning)).toEqual(SCRIPT.map((s) => s.reasoning))
  expect(replies.map((r) => r.content)).toEqual([null, "2+3 = 5.", null, "4+4 = 8."])
  // As the client holds them (Messages gives an object, not the model's text: compared parsed).
  expect(replies.map((r) => r.toolCalls.map((c) => [c.name, JSON.parse(c.arguments)]))).toEqual([[["add", { a: 2, b: 3 }]], [], [["add", { a: 4, b: 4 }]], []])
  expect(replies.map((r) => r.finish)).toEqual(["tool_calls", "stop", "tool_calls", "stop"])
  expect(calls).toHaveLength(4)

  // Recorded = sampled: what the response carried, the script's text, and the engine's own greedy choice.
  for (const [i, call] of calls.entries()) {
    if (replies[i]!.tokenIds !== null) expect(call.output_token_ids).toEqual(replies[i]!.tokenIds)
    expect(policy.tokenizer.decode(call.output_token_ids)).toBe(SCRIPT[i]!.text + "<|im_end|>")
    expect(call.output_logprobs).toHaveLength(call.output_token_ids.length)
    expect(call.trainable).toBe(true)
    expect(await policy.greedy(Int32Array.from(call.prompt_token_ids), call.output_token_ids.length + 4)).toEqual(call.output_token_ids)
  }

  const before = (c: any) => [...c.prompt_token_ids, ...c.output_token_ids]
  expect(calls[0].reuse).toEqual({ reused_tokens: 0, from_call_id: null, break: null })
  // (a) Inside the tool loop the template keeps the call and its reasoning verbatim: exact ids extended.
  expect(calls[1].reuse).toEqual({ reused_tokens: before(calls[0]).length, from_call_id: calls[0].id, break: null })
  expect(startsWith(calls[1].prompt_token_ids, before(calls[0]))).toBe(true)
  // (b) After the new question the template drops the earlier reasoning: a template break.
  expect(calls[2].reuse).toEqual({ reused_tokens: 0, from_call_id: null, break: "template" })
  expect(startsWith(calls[2].prompt_token_ids, before(calls[1]))).toBe(false)
  expect(policy.tokenizer.decode(calls[2].prompt_token_ids)).toContain("<|im_start|>assistant\n2+3 = 5.<|im_end|>")
  // …and the next tool loop extends the new prompt again.
  expect(calls[3].reuse).toEqual({ reused_tokens: before(calls[2]).length, from_call_id: calls[2].id, break: null })
  expect(startsWith(calls[3].prompt_token_ids, before(calls[2]))).toBe(true)
}

describe("a Hugging Face (Qwen3) model behind the Gateway", () => {
  let runs: Array<Awaited<ReturnType<typeof converse>>> = []

  it("reuses exact ids inside a tool loop and breaks on the template after a new question", async () => {
    const run = await converse({ stream: false, echoReasoning: false })
    await checkRun(run)
    runs.push(run)
  })

  it("streams reasoning_content, and matches reasoning the client sends back like any turn", async () => {
    const run = await converse({ stream: true, echoReasoning: true })
    await checkRun(run)
    runs.push(run)
  })

  it("serves the same conversation through the Responses API: reasoning items, reuse by call_id, the same break", async () => {
    for (const options of [{ stream: false, echoReasoning: false }, { stream: true, echoReasoning: true }]) {
      const run = await converseResponses(options)
      await checkRun(run)
      expect(run.calls.map((c: any) => [c.endpoint, c.protocol])).toEqual(Array(4).fill(["responses", "openai"]))
      expect(run.calls[0].response.output.map((o: any) => o.type)).toEqual(["reasoning", "function_call"])
      runs.push(run)
    }
  })

  it("serves the same conversation through Anthropic Messages: thinking blocks, reuse by tool_use_id, the same break", async () => {
    for (const options of [{ stream: false, echoReasoning: true }, { stream: true, echoReasoning: false }]) {
      const run = await converseMessages(options)
      await checkRun(run)
      expect(run.calls.map((c: any) => [c.endpoint, c.protocol])).toEqual(Array(4).fill(["messages", "anthropic"]))
      expect(run.calls[0].response.content.map((b: any) => b.type)).toEqual(["thinking", "tool_use"])
      runs.push(run)
    }
  })

  it("makes the Trainer's segments whatever the protocol: a template break, every sampled token once, each rollout weighed once", async () => {
    expect(runs).toHaveLength(6)
    // A third rollout of one short call: one segment, a few tokens.
    const short = await gw.attempt()
    const openai = new OpenAI({ baseURL: short.baseUrl, apiKey: short.key, maxRetries: 0 })
    await openai.chat.completions.create({ model: QWEN3_MODEL_ID, messages: [{ role: "user", content: "Hi" }], max_tokens: 3 })
    const shortSegments = adaptRollout(traceOf(await Effect.runPromise(gw.store.rollout(short.rolloutId))), { mode: "chain", maxTokens: 4096 }).segments
    expect(shortSegments).toHaveLength(1)
    const scored = shortSegments.map((s) => ({ ...s, advantages: new Float32Array(s.tokens.length).fill(1) }))
    for (const run of runs) {
      const record = await Effect.runPromise(gw.store.rollout(run.rolloutId))
      const { segments, drops } = adaptRollout(traceOf(record), { mode: "chain", maxTokens: 4096 })
      expect(Object.values(drops.snapshot()).every((d) => d.count === 0)).toBe(true)
      expect(segments.map((s) => s.start)).toEqual(["first", "template"])
      const byId = new Map(run.calls.map((c: any) => [c.id, c] as const))
      expect(segments.map((s) => s.spans.map((p) => p.callId))).toEqual([[run.calls[0].id, run.calls[1].id], [run.calls[2].id, run.calls[3].id]])
      let trained = 0
      for (const s of segments) {
        // The segment is its last call's prompt + output; each call's output is an action span there.
        const last = byId.get(s.spans[s.spans.length - 1]!.callId)
        expect(Array.from(s.tokens)).toEqual([...last.prompt_token_ids, ...last.output_token_ids])
        const mask = new Uint8Array(s.tokens.length)
        for (const span of s.spans) {
          const call = byId.get(span.callId)
          expect(Array.from(s.tokens.subarray(span.start, span.end))).toEqual(call.output_token_ids)
          expect(Array.from(s.behaviorLogprobs.subarray(span.start, span.end))).toEqual(call.output_logprobs.map(Math.fround))
          mask.fill(1, span.start, span.end)
        }
        // Actions are exactly the sampled tokens: prompts, tool results and re-rendered history are not.
        expect(Array.from(s.lossMask)).toEqual(Array.from(mask))
        trained += s.actionTokens
      }
      expect(trained).toBe(run.calls.reduce((n: number, c: any) => n + c.output_token_ids.length, 0))
      scored.push(...segments.map((s) => ({ ...s, advantages: new Float32Array(s.tokens.length).fill(1) })))
    }
    // Rollout normalization: each rollout weighs the same, whatever its protocol, segments and tokens.
    const samples = normalize(scored, "rollout")
    const weights = weightByRollout(samples)
    expect(weights.size).toBe(7)
    for (const w of weights.values()) expect(w).toBeCloseTo(1 / 7, 5)
  })

  it("passes chat_template_kwargs to the template, and answers a template's refusal with a 400", async () => {
    const a = await gw.attempt()
    const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
    await openai.chat.completions.create({
      model: QWEN3_MODEL_ID,
      messages: [{ role: "user", content: QUESTIONS[0]! }],
      max_tokens: 4,
      chat_template_kwargs: { enable_thinking: false }
    } as OpenAI.ChatCompletionCreateParamsNonStreaming)
    const [call] = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls
    expect(policy.tokenizer.decode(call.prompt_token_ids).endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true)

    const strict = new HfPromptTemplate(
      HfChatTemplate.make({
        templates: { default: "{%- if messages | length > 1 %}{{ raise_exception('one message per conversation') }}{% endif %}<|im_start|>user\n{{ messages[0].content }}<|im_end|>\n<|im_start|>assistant\n" }
      })
    )
    const other = await startGateway(policy.backendWith(strict))
    try {
      const b = await other.attempt()
      const client = new OpenAI({ baseURL: b.baseUrl, apiKey: b.key, maxRetries: 0 })
      const refused = await client.chat.completions
        .create({ model: QWEN3_MODEL_ID, max_tokens: 2, messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }] })
        .then(() => null, (e: unknown) => e)
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError)
      expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("The model's chat template refused the conversation: one message per conversation")
    } finally {
      await other.close()
    }
  })
})
