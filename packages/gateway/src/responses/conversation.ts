/**
 * A Responses request as the one internal conversation: `instructions` as the system turn, the
 * conversation of `previous_response_id` (its input and output, from the store), then the input
 * items. Consecutive assistant-side items (reasoning, an assistant message, function calls) are
 * one assistant turn, as the Gateway answered them; `call_id` is the tool-call id, so a reply sent
 * back as output items is matched like a chat reply by its `tool_call_id`s.
 */
import type { ChatAssistantMessage, ChatMessage, ChatTool, ChatToolCall, LlmCall } from "@reins/protocol"
import { Either } from "effect"
import type { Conversation } from "../calls/plan.js"
import { type ApiError, badRequest } from "../http/errors.js"
import type { Reply } from "../prompt/keys.js"
import type { ConversationItem, FunctionTool, InputItem, MessagePart, ResponsesRequest } from "./request.js"
import { asConversationItem, validateResponses } from "./request.js"

const partsText = (content: string | ReadonlyArray<MessagePart>): string =>
  typeof content === "string" ? content : content.map((p) => (p.type === "refusal" ? p.refusal : p.text)).join("")

interface Assistant {
  content: string | null
  reasoning: string | undefined
  calls: Array<ChatToolCall>
}

const assistantMessage = (a: Assistant): ChatAssistantMessage => ({
  role: "assistant",
  content: a.content ?? (a.calls.length > 0 ? null : ""),
  ...(a.calls.length > 0 ? { tool_calls: a.calls } : {}),
  ...(a.reasoning !== undefined ? { reasoning_content: a.reasoning } : {})
})

/** The input items as chat messages (assistant-side items grouped into turns). */
export const itemsToMessages = (items: ReadonlyArray<ConversationItem>): Array<ChatMessage> => {
  const out: Array<ChatMessage> = []
  let turn: Assistant | null = null
  const flush = () => {
    const t = turn as Assistant | null
    // A reasoning item without its text alone is not a turn (the turn it opened never came).
    if (t !== null && (t.content !== null || t.calls.length > 0 || t.reasoning !== undefined)) out.push(assistantMessage(t))
    turn = null
  }
  const open = (): Assistant => (turn ??= { content: null, reasoning: undefined, calls: [] })
  for (const item of items) {
    switch (item.type) {
      case "reasoning": {
        if (turn !== null) flush()
        const text = item.content?.map((c) => c.text).join("") ?? ""
        // Without its text (a client that keeps only the summary) the turn is matched without reasoning.
        if (item.content != null && item.content.length > 0) open().reasoning = text
        else open()
        break
      }
      case "function_call":
        open().calls.push({ id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } })
        break
      case "function_call_output":
        flush()
        out.push({ role: "tool", tool_call_id: item.call_id, content: typeof item.output === "string" ? item.output : item.output.map((p) => p.text).join("") })
        break
      default: {
        if (item.role === "assistant") {
          const current = turn as Assistant | null
          if (current !== null && (current.content !== null || current.calls.length > 0)) flush()
          const a = open()
          a.content = partsText(item.content)
          break
        }
        flush()
        out.push({ role: item.role, content: partsText(item.content) })
      }
    }
  }
  flush()
  return out
}

export const chatTools = (tools: ReadonlyArray<FunctionTool>): Array<ChatTool> =>
  tools.map((t) => ({
    type: "function",
    function: {
      name: t.name,
      ...(t.description != null ? { description: t.description } : {}),
      ...(t.parameters != null ? { parameters: t.parameters } : {}),
      ...(t.strict != null ? { strict: t.strict } : {})
    }
  }))

/** The output items of an attempt's recorded responses, by item id. */
export type ItemLookup = (id: string) => ConversationItem | undefined

/** The input with every `item_reference` replaced by the output item it names. */
export const resolveReferences = (input: ReadonlyArray<InputItem>, lookup: ItemLookup): Either.Either<Array<ConversationItem>, ApiError> => {
  const out: Array<ConversationItem> = []
  for (let i = 0; i < input.length; i++) {
    const item = input[i]!
    if (item.type !== "item_reference") {
      out.push(item)
      continue
    }
    const found = lookup(item.id)
    if (found === undefined) return Either.left(badRequest(`Item with id '${item.id}' not found in this attempt's stored responses.`, `input[${i}].id`, "item_not_found"))
    out.push(found)
  }
  return Either.right(out)
}

/** The conversation of a validated request (references resolved), given the conversation its `previous_response_id` names. */
export const toConversation = (body: unknown, r: ResponsesRequest, items: ReadonlyArray<ConversationItem>, previous: ReadonlyArray<ChatMessage>): Conversation => {
  const system: Array<ChatMessage> = r.instructions != null && r.instructions !== "" ? [{ role: "system", content: r.instructions }] : []
  const tools = chatTools(r.tools)
  return {
    request: body,
    model: r.model,
    messages: [...system, ...previous, ...itemsToMessages(items)],
    tools: tools.length > 0 ? tools : undefined,
    parseTools: tools.length > 0 && r.tool_choice !== "none",
    templateKwargs: r.chat_template_kwargs ?? undefined,
    sampling: {
      maxTokens: r.max_output_tokens ?? null,
      temperature: r.temperature,
      topP: r.top_p,
      topK: undefined,
      seed: undefined,
      stop: [],
      topLogprobs: r.top_logprobs ?? 0
    },
    stream: r.stream === true,
    includeUsage: false,
    returnLogprobs: r.include?.includes("message.output_text.logprobs") === true
  }
}

type Json = Record<string, any>

/** What a recorded response answered, as the assistant turn a client sends back. */
export const replyOfResponse = (response: Json): Reply => {
  let content = ""
  let reasoning: string | undefined
  const toolCalls: Array<{ id: string; name: string; arguments: string }> = []
  for (const item of (response.output ?? []) as ReadonlyArray<Json>) {
    if (item.type === "reasoning") reasoning = ((item.content ?? []) as ReadonlyArray<Json>).map((c) => String(c.text ?? "")).join("")
    else if (item.type === "message") content += ((item.content ?? []) as ReadonlyArray<Json>).map((c) => String(c.text ?? "")).join("")
    else if (item.type === "function_call") toolCalls.push({ id: String(item.call_id), name: String(item.name), arguments: String(item.arguments) })
  }
  return { content, toolCalls, ...(reasoning !== undefined ? { reasoning } : {}) }
}

const replyMessage = (reply: Reply): ChatMessage =>
  assistantMessage({
    content: reply.toolCalls.length > 0 && reply.content === "" ? null : reply.content,
    reasoning: reply.reasoning,
    calls: reply.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }))
  })

/** A recorded Responses call as the conversation it was prompted with and the reply it got. */
export interface RecordedResponse {
  readonly id: string
  readonly conversation: Conversation
  readonly reply: Reply
  /** Chainable by `previous_response_id` / retrievable by `GET` (`store` was not false). */
  readonly stored: boolean
  /** The response as it was sent (what `GET /v1/responses/{id}` returns). */
  readonly body: unknown
}

/**
 * The successful Responses calls of an attempt, folded in `seq` order, each with its whole
 * conversation: a call's `previous_response_id` is resolved from the calls before it (what the
 * store keeps per attempt). Calls that cannot be decoded any more are skipped. Incremental, so
 * a long conversation is not re-decoded at every turn (see `Conversations.responses`); calls at or
 * before the last one folded are ignored.
 */
export const responsesFold = () => {
  const byId = new Map<string, RecordedResponse>()
  const items = new Map<string, ConversationItem>()
  const lookup: ItemLookup = (id) => items.get(id)
  let lastSeq = 0
  const add = (call: LlmCall) => {
    if (call.seq <= lastSeq) return
    lastSeq = call.seq
    if (call.endpoint !== "responses" || call.status !== 200) return
    const response = call.response as Json | null
    const r = validateResponses(call.request)
    if (response === null || typeof response.id !== "string" || Either.isLeft(r)) return
    const previousId = r.right.previous_response_id ?? null
    const previous = previousId === null ? undefined : byId.get(previousId)
    const input = resolveReferences(r.right.input, lookup)
    if ((previousId !== null && previous === undefined) || Either.isLeft(input)) return
    const reply = replyOfResponse(response)
    const stored = r.right.store !== false
    byId.set(response.id, { id: response.id, conversation: toConversation(call.request, r.right, input.right, historyOf(previous)), reply, stored, body: response })
    if (!stored) return
    for (const out of (response.output ?? []) as ReadonlyArray<Json>) {
      const item = typeof out?.id === "string" ? asConversationItem(out) : null
      if (item !== null) items.set(out.id, item)
    }
  }
  const recorded: RecordedResponses = { byId, lookup }
  return { add, recorded, lastSeq: () => lastSeq }
}

/** The recorded responses of an attempt's calls (all of them, in `seq` order). */
export const recordedResponses = (calls: ReadonlyArray<LlmCall>): RecordedResponses => {
  const fold = responsesFold()
  for (const call of calls) fold.add(call)
  return fold.recorded
}

/** An attempt's stored responses by response id, and their output items by item id. */
export interface RecordedResponses {
  readonly byId: ReadonlyMap<string, RecordedResponse>
  readonly lookup: ItemLookup
}

/** The messages a response continues from: its conversation without the instructions, then its reply. */
export const historyOf = (previous: RecordedResponse | undefined): Array<ChatMessage> => {
  if (previous === undefined) return []
  const r = previous.conversation.request as { instructions?: string | null }
  // Instructions are not carried over to the next response (as OpenAI does): drop that system turn.
  const messages = r.instructions != null && r.instructions !== "" ? previous.conversation.messages.slice(1) : previous.conversation.messages
  return [...messages, replyMessage(previous.reply)]
}
