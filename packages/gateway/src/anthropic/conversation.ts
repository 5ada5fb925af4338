/**
 * A Messages request as the one internal conversation: `system` as the system turn, each user
 * message's `tool_result` blocks as tool messages (tied by `tool_use_id`) and its text as a user
 * turn, each assistant message's `thinking`, text and `tool_use` blocks as one assistant turn
 * (reasoning, content, tool calls with `id` = the `tool_use` id). A reply sent back as content
 * blocks is then matched like a chat reply by its tool-call ids.
 */
import type { ChatMessage, ChatTool, ChatToolCall } from "@reins/protocol"
import type { Conversation } from "../calls/plan.js"
import type { Reply } from "../prompt/keys.js"
import type { ContentBlock, CountTokensRequest, CustomTool, Message, MessagesRequest, TextBlock } from "./request.js"

const texts = (blocks: ReadonlyArray<TextBlock>) => blocks.map((b) => b.text).join("")

/** System text blocks are joined by blank lines, as one system prompt. */
const systemText = (system: string | ReadonlyArray<TextBlock> | undefined): string => (typeof system === "string" ? system : (system ?? []).map((b) => b.text).join("\n\n"))

const userMessages = (content: string | ReadonlyArray<ContentBlock>): Array<ChatMessage> => {
  if (typeof content === "string") return [{ role: "user", content }]
  const out: Array<ChatMessage> = []
  let text: string | null = null
  const flush = () => {
    if (text !== null) out.push({ role: "user", content: text })
    text = null
  }
  for (const block of content) {
    if (block.type === "tool_result") {
      flush()
      const result = typeof block.content === "string" ? block.content : texts(block.content ?? [])
      // A chat template has no error flag for a tool result: the model reads it in the text.
      out.push({ role: "tool", tool_call_id: block.tool_use_id, content: block.is_error === true ? `Error: ${result}` : result })
    } else if (block.type === "text") text = (text ?? "") + block.text
  }
  flush()
  return out
}

const assistantMessage = (content: string | ReadonlyArray<ContentBlock>): ChatMessage => {
  if (typeof content === "string") return { role: "assistant", content }
  let text = ""
  let reasoning: string | undefined
  const calls: Array<ChatToolCall> = []
  for (const block of content) {
    if (block.type === "text") text += block.text
    else if (block.type === "thinking") reasoning = (reasoning ?? "") + block.thinking
    else if (block.type === "tool_use") calls.push({ id: block.id, type: "function", function: { name: block.name, arguments: JSON.stringify(block.input) } })
  }
  return {
    role: "assistant",
    content: calls.length > 0 && text === "" ? null : text,
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
    ...(reasoning !== undefined ? { reasoning_content: reasoning } : {})
  }
}

export const toMessages = (system: string | ReadonlyArray<TextBlock> | undefined, messages: ReadonlyArray<Message>): Array<ChatMessage> => {
  const text = systemText(system)
  return [
    ...(text !== "" ? [{ role: "system" as const, content: text }] : []),
    ...messages.flatMap((m) => (m.role === "user" ? userMessages(m.content) : [assistantMessage(m.content)]))
  ]
}

export const chatTools = (tools: ReadonlyArray<CustomTool>): Array<ChatTool> =>
  tools.map((t) => ({ type: "function", function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema } }))

/** The conversation of a validated request (`count_tokens` renders the same prompt). */
export const toConversation = (body: unknown, r: MessagesRequest | CountTokensRequest): Conversation => {
  const tools = chatTools(r.tools)
  const m = r as Partial<MessagesRequest>
  return {
    request: body,
    model: r.model,
    messages: toMessages(r.system, r.messages),
    tools: tools.length > 0 ? tools : undefined,
    parseTools: tools.length > 0 && r.tool_choice?.type !== "none",
    templateKwargs: undefined,
    sampling: {
      maxTokens: m.max_tokens ?? null,
      temperature: m.temperature,
      topP: m.top_p,
      topK: m.top_k,
      seed: undefined,
      stop: m.stop_sequences ?? [],
      topLogprobs: 0,
      capToContext: true
    },
    stream: m.stream === true,
    includeUsage: false,
    returnLogprobs: false
  }
}

type Json = Record<string, any>

/** What a recorded message answered, as the assistant turn a client sends back. */
export const replyOfMessage = (response: Json): Reply => {
  let content = ""
  let reasoning: string | undefined
  const toolCalls: Array<{ id: string; name: string; arguments: string }> = []
  for (const block of (response.content ?? []) as ReadonlyArray<Json>) {
    if (block.type === "text") content += String(block.text ?? "")
    else if (block.type === "thinking") reasoning = (reasoning ?? "") + String(block.thinking ?? "")
    else if (block.type === "tool_use") toolCalls.push({ id: String(block.id), name: String(block.name), arguments: JSON.stringify(block.input ?? {}) })
  }
  return { content, toolCalls, ...(reasoning !== undefined ? { reasoning } : {}) }
}
