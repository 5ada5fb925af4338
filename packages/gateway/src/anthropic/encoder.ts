/**
 * The Messages answer: a `message` whose content is a `thinking` block (the model's reasoning
 * block), a `text` block and a `tool_use` block per tool call, with `stop_reason` and `usage`;
 * or, when streaming, `message_start`, `ping`, per block `content_block_start`, its deltas
 * (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`, then
 * `message_delta` and `message_stop`, sent once the call is recorded.
 */
import type { GenerateChunk } from "@reins/protocol"
import { randomBytes } from "node:crypto"
import { type Generated, hasReasoning, hasText, type ReplyEncoder } from "../calls/encoder.js"
import type { ApiError } from "../http/errors.js"
import { namedSse } from "../http/sse.js"
import type { Streamed } from "../openai/output.js"
import type { ReplyCall } from "../prompt/keys.js"
import { anthropicErrorBody } from "./errors.js"

export const messageId = () => `msg_${randomBytes(12).toString("hex")}`

export interface MessagesEncoderOptions {
  readonly id: string
  readonly model: string
  readonly promptIds: Int32Array
}

type Json = Record<string, unknown>

/** A reasoning model's blocks carry a signature in Anthropic's API; a local policy has none to give. */
const SIGNATURE = ""

const stopReason = (g: Generated) =>
  g.finish === "tool_calls" ? "tool_use" : g.finish === "length" ? "max_tokens" : g.output.stopSequence !== null ? "stop_sequence" : "end_turn"

const inputOf = (c: ReplyCall): Json => {
  try {
    const parsed: unknown = JSON.parse(c.arguments)
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Json) : {}
  } catch {
    return {}
  }
}

const usage = (input: number, output: number) => ({ input_tokens: input, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 })

export const messagesEncoder = (o: MessagesEncoderOptions): ReplyEncoder => {
  const content = (g: Generated): Array<Json> => [
    ...(hasReasoning(g) ? [{ type: "thinking", thinking: g.output.reasoning!, signature: SIGNATURE }] : []),
    ...(hasText(g) ? [{ type: "text", text: g.output.content }] : []),
    ...g.output.toolCalls.map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: inputOf(c) }))
  ]
  const message = (blocks: Array<Json>, g: Generated | null): Json => ({
    id: o.id,
    type: "message",
    role: "assistant",
    model: o.model,
    content: blocks,
    stop_reason: g === null ? null : stopReason(g),
    stop_sequence: g === null ? null : g.output.stopSequence,
    usage: usage(o.promptIds.length, g === null ? 0 : g.sampled.count)
  })

  // Stream state: the index of the open block and its kind.
  let index = -1
  let open: "thinking" | "text" | null = null
  let thinkingDone = false
  let textDone = false
  const event = (type: string, data: Json = {}) => namedSse(type, { type, ...data })
  const startBlock = (kind: "thinking" | "text") => {
    index++
    open = kind
    return event("content_block_start", { index, content_block: kind === "thinking" ? { type: "thinking", thinking: "", signature: "" } : { type: "text", text: "" } })
  }
  const stopBlock = (): Array<Uint8Array> => {
    if (open === null) return []
    const events = open === "thinking" ? [event("content_block_delta", { index, delta: { type: "signature_delta", signature: SIGNATURE } })] : []
    if (open === "thinking") thinkingDone = true
    else textDone = true
    open = null
    return [...events, event("content_block_stop", { index })]
  }
  const delta = (kind: "thinking" | "text", text: string): Array<Uint8Array> => {
    if (text === "") return []
    const events: Array<Uint8Array> = []
    if (open !== null && open !== kind) events.push(...stopBlock())
    if (open === null) events.push(startBlock(kind))
    events.push(event("content_block_delta", { index, delta: kind === "thinking" ? { type: "thinking_delta", thinking: text } : { type: "text_delta", text } }))
    return events
  }

  return {
    callId: (id) => `toolu_${id.replace(/^call_/, "")}`,
    body: (g) => message(content(g), g),
    start: () => [event("message_start", { message: message([], null) }), event("ping")],
    chunk: (_chunk: GenerateChunk, text: Streamed) => [...delta("thinking", text.reasoning), ...delta("text", text.content)],
    end: (g) => {
      const events: Array<Uint8Array> = []
      if (!thinkingDone && hasReasoning(g)) events.push(...delta("thinking", g.output.reasoningDelta))
      if (open === "thinking") events.push(...stopBlock())
      if (!textDone && hasText(g)) {
        if (open === null) events.push(startBlock("text"))
        events.push(...delta("text", g.output.delta), ...stopBlock())
      }
      for (const c of g.output.toolCalls) {
        index++
        events.push(
          event("content_block_start", { index, content_block: { type: "tool_use", id: c.id, name: c.name, input: {} } }),
          event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: JSON.stringify(inputOf(c)) } }),
          event("content_block_stop", { index })
        )
      }
      events.push(
        event("message_delta", { delta: { stop_reason: stopReason(g), stop_sequence: g.output.stopSequence }, usage: { output_tokens: g.sampled.count } }),
        event("message_stop")
      )
      return events
    },
    error: (e: ApiError) => [namedSse("error", anthropicErrorBody(e))]
  }
}
