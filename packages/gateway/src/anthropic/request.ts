/**
 * The Anthropic Messages request body (`POST /v1/messages`, and the subset `count_tokens`
 * reads), validated into 400s that name the field. Forcing a tool (`tool_choice` any/tool),
 * server tools, images and documents, and an assistant prefill cannot be served by a local
 * policy without changing what is sampled, so they are refused by name.
 */
import { Either, Schema } from "effect"
import { type ApiError, badRequest, unsupported } from "../http/errors.js"
import { checkKnown, checkObject, decode } from "../openai/requests.js"

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optional(Schema.NullOr(s))

/** `cache_control` and `citations` are accepted on any block and ignored (they change nothing sampled). */
const TextBlock = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })
const ToolUseBlock = Schema.Struct({
  type: Schema.Literal("tool_use"),
  id: Schema.String,
  name: Schema.String,
  input: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})
const ToolResultBlock = Schema.Struct({
  type: Schema.Literal("tool_result"),
  tool_use_id: Schema.String,
  content: Schema.optional(Schema.Union(Schema.String, Schema.Array(TextBlock))),
  is_error: opt(Schema.Boolean)
})
const ThinkingBlock = Schema.Struct({ type: Schema.Literal("thinking"), thinking: Schema.String, signature: Schema.optional(Schema.String) })

export type TextBlock = typeof TextBlock.Type
export type ContentBlock = TextBlock | typeof ToolUseBlock.Type | typeof ToolResultBlock.Type | typeof ThinkingBlock.Type

const blockSchemas = { text: TextBlock, tool_use: ToolUseBlock, tool_result: ToolResultBlock, thinking: ThinkingBlock } as const

export interface Message {
  readonly role: "user" | "assistant"
  readonly content: string | ReadonlyArray<ContentBlock>
}

const CustomTool = Schema.Struct({
  type: Schema.optional(Schema.Literal("custom")),
  name: Schema.String,
  description: Schema.optional(Schema.String),
  input_schema: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})
export type CustomTool = typeof CustomTool.Type

const ToolChoice = Schema.Struct({
  type: Schema.Literal("auto", "any", "tool", "none"),
  name: Schema.optional(Schema.String),
  disable_parallel_tool_use: Schema.optional(Schema.Boolean)
})

/** The fields `count_tokens` accepts (a subset of a message request's). */
const countFields = {
  model: Schema.String,
  messages: Schema.Array(Schema.Unknown),
  system: Schema.optional(Schema.Union(Schema.String, Schema.Array(TextBlock))),
  tools: Schema.optional(Schema.Array(Schema.Unknown)),
  tool_choice: Schema.optional(ToolChoice),
  /** Accepted: the model reasons as its chat template lets it (the budget and display are not honoured). */
  thinking: Schema.optional(
    Schema.Struct({ type: Schema.Literal("enabled", "disabled", "adaptive", "between_tools"), budget_tokens: Schema.optional(Schema.Int), display: opt(Schema.String) })
  ),
  /** Effort is accepted like `thinking`; a JSON output `format` is refused (it needs constrained decoding). */
  output_config: Schema.optional(Schema.Struct({ effort: opt(Schema.String), format: opt(Schema.Unknown) }))
}

const MessagesFields = Schema.Struct({
  ...countFields,
  max_tokens: Schema.Int.pipe(Schema.positive()),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_p: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_k: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  stop_sequences: Schema.optional(Schema.Array(Schema.String)),
  stream: Schema.optional(Schema.Boolean),
  metadata: Schema.optional(Schema.Struct({ user_id: opt(Schema.String) })),
  // Accepted and ignored: they change where or how fast a hosted model runs, not what is sampled.
  service_tier: Schema.optional(Schema.String),
  cache_control: opt(Schema.Unknown),
  inference_geo: opt(Schema.String),
  speed: opt(Schema.String),
  diagnostics: opt(Schema.Unknown),
  container: opt(Schema.Unknown)
})
const CountFields = Schema.Struct(countFields)

type Decoded<F extends Schema.Struct.Fields> = Omit<Schema.Struct.Type<F>, "messages" | "tools"> & {
  readonly messages: ReadonlyArray<Message>
  readonly tools: ReadonlyArray<CustomTool>
}
export type MessagesRequest = Decoded<typeof MessagesFields.fields>
export type CountTokensRequest = Decoded<typeof countFields>

const decodeContent = (content: unknown, at: string, role: "user" | "assistant"): Either.Either<string | Array<ContentBlock>, ApiError> => {
  if (typeof content === "string") return Either.right(content)
  if (!Array.isArray(content)) return Either.left(badRequest(`'${at}' must be a string or an array of content blocks.`, at))
  const decodeBlock = (raw: unknown, j: number): Either.Either<ContentBlock, ApiError> => {
    const where = `${at}[${j}]`
    const type = (raw as { type?: unknown } | null)?.type
    const schema = typeof type === "string" ? blockSchemas[type as keyof typeof blockSchemas] : undefined
    if (schema === undefined) {
      return Either.left(unsupported(`Content blocks of type ${JSON.stringify(type ?? null)} are not supported; use text, tool_use, tool_result or thinking.`, `${where}.type`))
    }
    const toolResultContent = (raw as { content?: unknown }).content
    if (type === "tool_result" && Array.isArray(toolResultContent)) {
      const k = toolResultContent.findIndex((b) => (b as { type?: unknown } | null)?.type !== "text")
      if (k >= 0) return Either.left(unsupported("Tool results may only hold text blocks.", `${where}.content[${k}].type`))
    }
    const allowed = role === "user" ? ["text", "tool_result"] : ["text", "tool_use", "thinking"]
    return Either.flatMap(decode(schema as Schema.Schema<ContentBlock, unknown>, raw, where), (block) =>
      allowed.includes(block.type) ? Either.right(block) : Either.left(badRequest(`A ${role} message cannot hold a ${block.type} block.`, `${where}.type`))
    )
  }
  return Either.all(content.map(decodeBlock))
}

const decodeMessage = (raw: unknown, i: number): Either.Either<Message, ApiError> => {
  const at = `messages[${i}]`
  const m = raw as { role?: unknown; content?: unknown } | null
  if (typeof m !== "object" || m === null || Array.isArray(m)) return Either.left(badRequest(`'${at}' must be an object.`, at))
  if (m.role !== "user" && m.role !== "assistant") return Either.left(badRequest(`${at}.role: Input should be 'user' or 'assistant'.`, `${at}.role`))
  if (m.content === undefined) return Either.left(badRequest(`${at}.content: Field required.`, `${at}.content`, "missing_required_parameter"))
  const role = m.role
  return Either.map(decodeContent(m.content, `${at}.content`, role), (content) => ({ role, content }))
}

const decodeMessages = (raw: ReadonlyArray<unknown>): Either.Either<Array<Message>, ApiError> => {
  if (raw.length === 0) return Either.left(badRequest("messages: at least one message is required.", "messages"))
  return Either.flatMap(Either.all(raw.map(decodeMessage)), (out) =>
    out[out.length - 1]!.role === "assistant"
      ? Either.left(unsupported("A final assistant message (a prefill) is not supported: the reply is sampled from the model's own generation prompt.", `messages[${out.length - 1}]`))
      : Either.right(out)
  )
}

const decodeTools = (tools: ReadonlyArray<unknown>): Either.Either<Array<CustomTool>, ApiError> =>
  Either.all(
    tools.map((tool, i) => {
      const type = (tool as { type?: unknown } | null)?.type
      if (type !== undefined && type !== "custom") {
        return Either.left(unsupported(`Server tools such as ${JSON.stringify(type)} are not supported (they cannot run here); only client tools with an input_schema.`, `tools[${i}].type`))
      }
      return decode(CustomTool, tool, `tools[${i}]`)
    })
  )

const validate = <F extends Schema.Struct.Fields>(schema: Schema.Struct<F>, body: unknown): Either.Either<Decoded<F>, ApiError> =>
  Either.gen(function* () {
    const obj = yield* checkObject(body)
    yield* checkKnown(obj, new Set(Object.keys(schema.fields)))
    const fields = (yield* decode(schema as unknown as Schema.Schema<Schema.Struct.Type<F>, unknown>, obj)) as Schema.Struct.Type<F> & {
      readonly messages: ReadonlyArray<unknown>
      readonly tools?: ReadonlyArray<unknown>
      readonly tool_choice?: { readonly type: string }
    }
    const extra = fields as { readonly output_config?: { readonly format?: unknown }; readonly container?: unknown }
    if ((extra.output_config?.format ?? null) !== null) {
      return yield* Either.left(unsupported("output_config.format (structured output) is not supported: it needs constrained decoding.", "output_config.format"))
    }
    if ((extra.container ?? null) !== null) return yield* Either.left(unsupported("Containers (code execution) are not supported.", "container"))
    const choice = fields.tool_choice?.type ?? "auto"
    if (choice !== "auto" && choice !== "none") {
      return yield* Either.left(unsupported(`tool_choice '${choice}' is not supported (forcing a tool call needs constrained decoding); use 'auto' or 'none'.`, "tool_choice"))
    }
    const messages = yield* decodeMessages(fields.messages)
    const tools = yield* decodeTools(fields.tools ?? [])
    return { ...fields, messages, tools } as Decoded<F>
  })

export const validateMessages = (body: unknown): Either.Either<MessagesRequest, ApiError> => validate(MessagesFields, body)

export const validateCountTokens = (body: unknown): Either.Either<CountTokensRequest, ApiError> => validate(CountFields, body)
