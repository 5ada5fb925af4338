/**
 * The OpenAI Responses request body (`POST /v1/responses`) the Gateway accepts, validated into
 * 400s that name the field. What would change the sampled distribution or cannot be served by a
 * local policy — hosted tools, structured output, forcing a tool, images, background runs — is
 * refused by name rather than ignored.
 */
import { Either, Schema } from "effect"
import { type ApiError, badRequest, unsupported } from "../http/errors.js"
import { checkKnown, checkObject, decode } from "../openai/requests.js"

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optional(Schema.NullOr(s))

const InputText = Schema.Struct({ type: Schema.Literal("input_text"), text: Schema.String })
const OutputText = Schema.Struct({ type: Schema.Literal("output_text"), text: Schema.String })
const Refusal = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })
const MessagePart = Schema.Union(InputText, OutputText, Refusal)
export type MessagePart = typeof MessagePart.Type

/** A message item, with or without `type: "message"` (the SDKs' "easy" input message). */
export const MessageItem = Schema.Struct({
  type: Schema.optional(Schema.Literal("message")),
  id: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  role: Schema.Literal("user", "assistant", "system", "developer"),
  content: Schema.Union(Schema.String, Schema.Array(MessagePart))
})

export const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  id: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  call_id: Schema.String,
  name: Schema.String,
  arguments: Schema.String
})

export const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  id: Schema.optional(Schema.NullOr(Schema.String)),
  status: Schema.optional(Schema.NullOr(Schema.String)),
  call_id: Schema.String,
  output: Schema.Union(Schema.String, Schema.Array(InputText))
})

const SummaryText = Schema.Struct({ type: Schema.Literal("summary_text"), text: Schema.String })
const ReasoningText = Schema.Struct({ type: Schema.Literal("reasoning_text"), text: Schema.String })

export const ReasoningItem = Schema.Struct({
  type: Schema.Literal("reasoning"),
  id: Schema.optional(Schema.String),
  status: Schema.optional(Schema.NullOr(Schema.String)),
  summary: Schema.Array(SummaryText),
  content: Schema.optional(Schema.NullOr(Schema.Array(ReasoningText))),
  encrypted_content: Schema.optional(Schema.NullOr(Schema.String))
})

/** An earlier output item of this attempt, by id (clients that rely on stored responses send these). */
export const ItemReference = Schema.Struct({ type: Schema.Literal("item_reference"), id: Schema.String })
export type ItemReference = typeof ItemReference.Type

/** An item the conversation is made of (references resolved). */
export type ConversationItem =
  | typeof MessageItem.Type
  | typeof FunctionCallItem.Type
  | typeof FunctionCallOutputItem.Type
  | typeof ReasoningItem.Type

export type InputItem = ConversationItem | ItemReference

const itemSchemas = {
  message: MessageItem,
  function_call: FunctionCallItem,
  function_call_output: FunctionCallOutputItem,
  reasoning: ReasoningItem,
  item_reference: ItemReference
} as const

/** An output item of a recorded response as the item a client would send back (null: not one). */
export const asConversationItem = (item: unknown): ConversationItem | null => {
  const type = (item as { type?: unknown } | null)?.type
  const schema = typeof type === "string" && type !== "item_reference" ? itemSchemas[type as keyof typeof itemSchemas] : undefined
  if (schema === undefined) return null
  const decoded = decode(schema as Schema.Schema<ConversationItem, unknown>, item)
  return Either.isRight(decoded) ? decoded.right : null
}

export const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  name: Schema.String,
  description: opt(Schema.String),
  parameters: opt(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  strict: opt(Schema.Boolean)
})
export type FunctionTool = typeof FunctionTool.Type

/** `input` and `tools` are decoded per entry (see below), for precise error paths. */
const ResponsesFields = Schema.Struct({
  model: Schema.String,
  input: Schema.optional(Schema.Union(Schema.String, Schema.Array(Schema.Unknown))),
  instructions: opt(Schema.String),
  tools: opt(Schema.Array(Schema.Unknown)),
  tool_choice: opt(Schema.Unknown),
  parallel_tool_calls: opt(Schema.Boolean),
  max_output_tokens: opt(Schema.Int.pipe(Schema.positive())),
  temperature: opt(Schema.Number.pipe(Schema.between(0, 2))),
  top_p: opt(Schema.Number.pipe(Schema.between(0, 1))),
  top_logprobs: opt(Schema.Int.pipe(Schema.between(0, 20))),
  stream: opt(Schema.Boolean),
  stream_options: opt(Schema.Struct({ include_obfuscation: Schema.optional(Schema.NullOr(Schema.Boolean)) })),
  store: opt(Schema.Boolean),
  previous_response_id: opt(Schema.String),
  metadata: opt(Schema.Record({ key: Schema.String, value: Schema.String })),
  user: opt(Schema.String),
  include: opt(Schema.Array(Schema.String)),
  /** Accepted: the model reasons as its chat template lets it (effort and summaries are not honoured). */
  reasoning: opt(Schema.Struct({ effort: opt(Schema.String), summary: opt(Schema.String), generate_summary: opt(Schema.String) })),
  text: opt(Schema.Struct({ format: opt(Schema.Struct({ type: Schema.String })), verbosity: opt(Schema.String) })),
  truncation: opt(Schema.Literal("auto", "disabled")),
  service_tier: opt(Schema.String),
  prompt_cache_key: opt(Schema.String),
  safety_identifier: opt(Schema.String),
  max_tool_calls: opt(Schema.Int),
  background: opt(Schema.Boolean),
  conversation: opt(Schema.Unknown),
  prompt: opt(Schema.Unknown),
  n: opt(Schema.Int),
  /** vLLM's extension: extra variables for the model's chat template (Qwen3's `enable_thinking`). */
  chat_template_kwargs: opt(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})

export type ResponsesRequest = Omit<typeof ResponsesFields.Type, "input" | "tools"> & {
  readonly input: ReadonlyArray<InputItem>
  readonly tools: ReadonlyArray<FunctionTool>
}

const knownKeys = new Set(Object.keys(ResponsesFields.fields))

const decodeItem = (item: unknown, i: number): Either.Either<InputItem, ApiError> => {
  const at = `input[${i}]`
  if (typeof item !== "object" || item === null || Array.isArray(item)) return Either.left(badRequest(`'${at}' must be an object.`, at))
  const type = (item as { type?: unknown }).type ?? ((item as { role?: unknown }).role !== undefined ? "message" : undefined)
  const schema = typeof type === "string" ? itemSchemas[type as keyof typeof itemSchemas] : undefined
  if (schema === undefined) {
    return Either.left(unsupported(`Input items of type ${JSON.stringify(type ?? null)} are not supported; use message, function_call, function_call_output, reasoning or item_reference.`, `${at}.type`))
  }
  const content = (item as { content?: unknown }).content
  if (type === "message" && Array.isArray(content)) {
    const j = content.findIndex((p) => !["input_text", "output_text", "refusal"].includes((p as { type?: unknown } | null)?.type as string))
    if (j >= 0) {
      const partType = (content[j] as { type?: unknown } | null)?.type
      return Either.left(unsupported(`'${at}.content[${j}]': only text content is supported (got ${JSON.stringify(partType ?? null)}).`, `${at}.content[${j}].type`))
    }
  }
  return decode(schema as Schema.Schema<InputItem, unknown>, item, at)
}

const decodeInput = (input: string | ReadonlyArray<unknown> | undefined): Either.Either<Array<InputItem>, ApiError> => {
  if (input === undefined) return Either.right([])
  if (typeof input === "string") return Either.right([{ role: "user", content: input }])
  return Either.all(input.map(decodeItem))
}

const decodeTools = (tools: ReadonlyArray<unknown>): Either.Either<Array<FunctionTool>, ApiError> =>
  Either.all(
    tools.map((tool, i) => {
      const type = (tool as { type?: unknown } | null)?.type
      if (type !== "function") {
        return Either.left(unsupported(`Tools of type ${JSON.stringify(type ?? null)} are not supported (hosted tools cannot run here); only function tools.`, `tools[${i}].type`))
      }
      return decode(FunctionTool, tool, `tools[${i}]`)
    })
  )

/** Refuses, by name, what cannot be honoured without changing what is sampled. */
const checkSupported = (r: typeof ResponsesFields.Type): Either.Either<void, ApiError> => {
  if ((r.n ?? 1) !== 1) return Either.left(unsupported("Only n=1 is supported: send one request per sample (each is recorded as its own call).", "n"))
  const choice = r.tool_choice ?? "auto"
  if (choice !== "auto" && choice !== "none") {
    return Either.left(unsupported("tool_choice must be 'auto' or 'none' (forcing a tool call needs constrained decoding, which is not supported).", "tool_choice"))
  }
  const format = r.text?.format?.type ?? "text"
  if (format !== "text") return Either.left(unsupported(`text.format '${format}' is not supported (structured output needs constrained decoding); only 'text'.`, "text.format"))
  if (r.background === true) return Either.left(unsupported("Background responses are not supported.", "background"))
  if ((r.conversation ?? null) !== null) return Either.left(unsupported("Conversations objects are not supported; use previous_response_id or send the items.", "conversation"))
  if ((r.prompt ?? null) !== null) return Either.left(unsupported("Prompt templates are not supported; send the instructions and input.", "prompt"))
  if (r.truncation === "auto") return Either.left(unsupported("truncation 'auto' is not supported (dropping input would change what the model saw); only 'disabled'.", "truncation"))
  if ((r.stream_options ?? null) !== null && r.stream !== true) return Either.left(badRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"))
  return Either.void
}

export const validateResponses = (body: unknown): Either.Either<ResponsesRequest, ApiError> =>
  Either.gen(function* () {
    const obj = yield* checkObject(body)
    yield* checkKnown(obj, knownKeys)
    const fields = yield* decode(ResponsesFields, obj)
    yield* checkSupported(fields)
    const input = yield* decodeInput(fields.input)
    const tools = yield* decodeTools(fields.tools ?? [])
    if (input.length === 0 && (fields.previous_response_id ?? null) === null) {
      return yield* Either.left(badRequest("Missing required parameter: 'input'.", "input", "missing_required_parameter"))
    }
    return { ...fields, input, tools }
  })
