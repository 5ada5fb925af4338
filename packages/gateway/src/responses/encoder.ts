/**
 * The Responses answer: a `response` object whose `output` is a `reasoning` item (the model's
 * reasoning block), a `message` item (its text) and a `function_call` item per tool call; or, when
 * streaming, the semantic events in order, each with its `sequence_number`:
 * `response.created`, `response.in_progress`, then per item `response.output_item.added`,
 * `response.content_part.added`, the text deltas and `.done` events, `response.output_item.done`,
 * and last `response.completed` (or `response.incomplete`), sent once the call is recorded.
 * Item ids are fixed when the call starts, so the streamed items and the recorded response agree.
 */
import type { Tokenizer } from "@reins/policy/text"
import type { GenerateChunk } from "@reins/protocol"
import { randomBytes } from "node:crypto"
import { type Generated, hasReasoning, hasText, type ReplyEncoder } from "../calls/encoder.js"
import type { ApiError } from "../http/errors.js"
import { namedSse } from "../http/sse.js"
import type { Streamed } from "../openai/output.js"
import { chatLogprobs } from "../openai/responses.js"
import type { ReplyCall } from "../prompt/keys.js"
import type { ResponsesRequest } from "./request.js"

const hex = () => randomBytes(12).toString("hex")
export const responseId = () => `resp_${hex()}`

export interface ResponsesEncoderOptions {
  readonly id: string
  readonly createdAt: number
  readonly model: string
  /** The request as received and as validated (echoed in the response object). */
  readonly body: Readonly<Record<string, unknown>>
  readonly request: ResponsesRequest
  readonly promptIds: Int32Array
  /** Prompt tokens reused from earlier calls (reported as cached). */
  readonly reusedTokens: number
  readonly tokenizer: Tokenizer
  readonly returnLogprobs: boolean
  readonly topLogprobs: number
}

type Json = Record<string, unknown>

/** The response object around `output` (every field a client reads, as OpenAI fills them). */
const responseObject = (o: ResponsesEncoderOptions, status: string, output: ReadonlyArray<Json>, g: Generated | null): Json => ({
  id: o.id,
  object: "response",
  created_at: o.createdAt,
  status,
  background: false,
  error: null,
  incomplete_details: g !== null && g.finish === "length" ? { reason: "max_output_tokens" } : null,
  instructions: o.request.instructions ?? null,
  max_output_tokens: o.request.max_output_tokens ?? null,
  max_tool_calls: o.request.max_tool_calls ?? null,
  model: o.model,
  output,
  parallel_tool_calls: o.request.parallel_tool_calls ?? true,
  previous_response_id: o.request.previous_response_id ?? null,
  reasoning: { effort: o.request.reasoning?.effort ?? null, summary: o.request.reasoning?.summary ?? null },
  service_tier: "default",
  store: o.request.store ?? true,
  temperature: o.request.temperature ?? 1,
  text: { format: { type: "text" }, verbosity: o.request.text?.verbosity ?? "medium" },
  tool_choice: o.request.tool_choice ?? "auto",
  tools: o.body.tools ?? [],
  top_logprobs: o.request.top_logprobs ?? 0,
  top_p: o.request.top_p ?? 1,
  truncation: "disabled",
  usage:
    g === null
      ? null
      : {
          input_tokens: g.promptIds.length,
          input_tokens_details: { cached_tokens: o.reusedTokens },
          output_tokens: g.sampled.count,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: g.promptIds.length + g.sampled.count
        },
  user: o.request.user ?? null,
  metadata: o.request.metadata ?? {}
})

/** Fixed ids of the call's items (a reply has at most one reasoning and one message item). */
interface Ids {
  readonly reasoning: string
  readonly message: string
  readonly call: (c: ReplyCall) => string
}

const reasoningItem = (ids: Ids, text: string): Json => ({ id: ids.reasoning, type: "reasoning", summary: [], content: [{ type: "reasoning_text", text }] })

const textPart = (text: string, logprobs: ReadonlyArray<unknown>): Json => ({ type: "output_text", text, annotations: [], logprobs })

const messageItem = (ids: Ids, status: string, text: string, logprobs: ReadonlyArray<unknown>): Json => ({
  id: ids.message,
  type: "message",
  status,
  role: "assistant",
  content: [textPart(text, logprobs)]
})

const callItem = (ids: Ids, c: ReplyCall, status: string, args: string): Json => ({
  id: ids.call(c),
  type: "function_call",
  status,
  call_id: c.id,
  name: c.name,
  arguments: args
})

export const responsesEncoder = (o: ResponsesEncoderOptions): ReplyEncoder => {
  const ids: Ids = { reasoning: `rs_${hex()}`, message: `msg_${hex()}`, call: (c) => `fc_${c.id.replace(/^call_/, "")}` }
  const logprobsOf = (g: Generated) =>
    o.returnLogprobs
      ? chatLogprobs(o.tokenizer, { ids: g.sampled.outputIds, logprobs: g.sampled.logprobs, topIds: g.sampled.topIds, topLogprobs: g.sampled.topLogprobs, k: o.topLogprobs }).content
      : []
  const output = (g: Generated): Array<Json> => {
    const status = g.finish === "length" ? "incomplete" : "completed"
    return [
      ...(hasReasoning(g) ? [reasoningItem(ids, g.output.reasoning!)] : []),
      ...(hasText(g) ? [messageItem(ids, status, g.output.content, logprobsOf(g))] : []),
      ...g.output.toolCalls.map((c) => callItem(ids, c, "completed", c.arguments))
    ]
  }

  // Stream state: the next sequence number, the item being streamed and its text so far.
  let seq = 0
  let index = -1
  let open: { kind: "reasoning" | "message"; text: string } | null = null
  let reasoningDone = false
  let messageDone = false
  const event = (type: string, data: Json) => namedSse(type, { type, sequence_number: seq++, ...data })

  const openItem = (kind: "reasoning" | "message"): Array<Uint8Array> => {
    index++
    open = { kind, text: "" }
    const item: Json = kind === "reasoning" ? { ...reasoningItem(ids, ""), content: [] } : { ...messageItem(ids, "in_progress", "", []), content: [] }
    const part = kind === "reasoning" ? { type: "reasoning_text", text: "" } : textPart("", [])
    return [
      event("response.output_item.added", { output_index: index, item }),
      event("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part })
    ]
  }
  const closeItem = (final: Json): Array<Uint8Array> => {
    if (open === null) return []
    const { kind, text } = open
    open = null
    if (kind === "reasoning") reasoningDone = true
    else messageDone = true
    const itemId = kind === "reasoning" ? ids.reasoning : ids.message
    const part = kind === "reasoning" ? { type: "reasoning_text", text } : textPart(text, (final.content as Array<Json>)[0]!.logprobs as Array<unknown>)
    return [
      event(kind === "reasoning" ? "response.reasoning_text.done" : "response.output_text.done", {
        item_id: itemId,
        output_index: index,
        content_index: 0,
        text,
        ...(kind === "message" ? { logprobs: part.logprobs } : {})
      }),
      event("response.content_part.done", { item_id: itemId, output_index: index, content_index: 0, part }),
      event("response.output_item.done", { output_index: index, item: final })
    ]
  }
  const delta = (kind: "reasoning" | "message", text: string, close: (kind: "reasoning" | "message") => Json): Array<Uint8Array> => {
    if (text === "") return []
    const events: Array<Uint8Array> = []
    if (open !== null && open.kind !== kind) events.push(...closeItem(close(open.kind)))
    if (open === null) events.push(...openItem(kind))
    open!.text += text
    const itemId = kind === "reasoning" ? ids.reasoning : ids.message
    events.push(
      event(kind === "reasoning" ? "response.reasoning_text.delta" : "response.output_text.delta", {
        item_id: itemId,
        output_index: index,
        content_index: 0,
        delta: text,
        ...(kind === "message" ? { logprobs: [] } : {})
      })
    )
    return events
  }
  // While streaming, an item closed early (the reasoning once text begins) is final as streamed.
  const streamedFinal = (kind: "reasoning" | "message"): Json => (kind === "reasoning" ? reasoningItem(ids, open!.text) : messageItem(ids, "completed", open!.text, []))

  return {
    callId: (id) => id,
    body: (g) => responseObject(o, g.finish === "length" ? "incomplete" : "completed", output(g), g),
    start: () => {
      const shell = responseObject(o, "in_progress", [], null)
      return [event("response.created", { response: shell }), event("response.in_progress", { response: shell })]
    },
    chunk: (_chunk: GenerateChunk, text: Streamed) => [...delta("reasoning", text.reasoning, streamedFinal), ...delta("message", text.content, streamedFinal)],
    end: (g, body) => {
      const items = (body as { output: Array<Json> }).output
      const finalOf = (kind: "reasoning" | "message") => items.find((i) => i.type === kind)!
      const events: Array<Uint8Array> = []
      if (!reasoningDone && hasReasoning(g)) events.push(...delta("reasoning", g.output.reasoningDelta, finalOf))
      if (open?.kind === "reasoning") events.push(...closeItem(finalOf("reasoning")))
      if (!messageDone && hasText(g)) {
        if (open === null) events.push(...openItem("message"))
        if (g.output.delta !== "") events.push(...delta("message", g.output.delta, finalOf))
        events.push(...closeItem(finalOf("message")))
      }
      for (const c of g.output.toolCalls) {
        index++
        const item = callItem(ids, c, "in_progress", "")
        events.push(
          event("response.output_item.added", { output_index: index, item }),
          event("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: c.arguments }),
          event("response.function_call_arguments.done", { item_id: item.id, output_index: index, name: c.name, arguments: c.arguments }),
          event("response.output_item.done", { output_index: index, item: callItem(ids, c, "completed", c.arguments) })
        )
      }
      const done = g.finish === "length" ? "response.incomplete" : "response.completed"
      events.push(event(done, { response: body }))
      return events
    },
    error: (e: ApiError) => [event("error", { code: e.code, message: e.message, param: e.param })]
  }
}
