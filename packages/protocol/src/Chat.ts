/**
 * OpenAI chat-completions message and tool shapes, as the Gateway accepts them and the chat
 * template renders them. Field names follow the OpenAI wire format (snake_case) so a request
 * body decodes as-is. Only text content is supported: an image or audio part fails decoding
 * with a message naming the part, rather than being dropped.
 */
import { Schema } from "effect"

export const ChatTextPart = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String
})
export type ChatTextPart = typeof ChatTextPart.Type

/** An assistant's refusal, which OpenAI returns as a content part of its own. */
export const ChatRefusalPart = Schema.Struct({
  type: Schema.Literal("refusal"),
  refusal: Schema.String
})
export type ChatRefusalPart = typeof ChatRefusalPart.Type

/** A message body: a string, or text parts that are rendered concatenated (no separator). */
export const ChatContent = Schema.Union(Schema.String, Schema.Array(ChatTextPart))
export type ChatContent = typeof ChatContent.Type

/** `developer` is OpenAI's newer name for `system`; both render as a system turn. */
export const ChatSystemMessage = Schema.Struct({
  role: Schema.Literal("system", "developer"),
  content: ChatContent,
  name: Schema.optional(Schema.String)
})
export type ChatSystemMessage = typeof ChatSystemMessage.Type

export const ChatUserMessage = Schema.Struct({
  role: Schema.Literal("user"),
  content: ChatContent,
  name: Schema.optional(Schema.String)
})
export type ChatUserMessage = typeof ChatUserMessage.Type

/** A call the model made. `arguments` is a JSON text (of an object), exactly as OpenAI sends it. */
export const ChatToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.String
  })
})
export type ChatToolCall = typeof ChatToolCall.Type

export const ChatAssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(Schema.Union(ChatTextPart, ChatRefusalPart))))),
  refusal: Schema.optional(Schema.NullOr(Schema.String)),
  tool_calls: Schema.optional(Schema.Array(ChatToolCall)),
  name: Schema.optional(Schema.String),
  /**
   * The reasoning of a reasoning model's reply, as the Gateway returned it (vLLM's field; newer
   * vLLM calls it `reasoning`). Templates that keep reasoning in context (Qwen3's, within a tool
   * loop) render it back.
   */
  reasoning_content: Schema.optional(Schema.NullOr(Schema.String)),
  reasoning: Schema.optional(Schema.NullOr(Schema.String))
})
export type ChatAssistantMessage = typeof ChatAssistantMessage.Type

/** The result of a tool call, tied to the call by `tool_call_id`. */
export const ChatToolMessage = Schema.Struct({
  role: Schema.Literal("tool"),
  content: ChatContent,
  tool_call_id: Schema.String,
  /** Not part of OpenAI's shape; the template resolves the tool name from `tool_call_id`. */
  name: Schema.optional(Schema.String)
})
export type ChatToolMessage = typeof ChatToolMessage.Type

export const ChatMessage = Schema.Union(ChatSystemMessage, ChatUserMessage, ChatAssistantMessage, ChatToolMessage)
export type ChatMessage = typeof ChatMessage.Type

export const ChatFunctionDefinition = Schema.Struct({
  name: Schema.String,
  description: Schema.optional(Schema.String),
  /** A JSON Schema object describing the arguments. */
  parameters: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  strict: Schema.optional(Schema.NullOr(Schema.Boolean))
})
export type ChatFunctionDefinition = typeof ChatFunctionDefinition.Type

/** An entry of the request's `tools` array. */
export const ChatTool = Schema.Struct({
  type: Schema.Literal("function"),
  function: ChatFunctionDefinition
})
export type ChatTool = typeof ChatTool.Type
