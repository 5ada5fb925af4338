/**
 * The OpenAI request bodies the Gateway accepts, and their validation into clear 400s: the
 * `param` names the offending field (`messages[2].content`), unknown top-level fields are
 * rejected by name, and parameters that would silently change the sampling distribution (and so
 * the recorded logprobs) without being honoured are refused rather than ignored.
 */
import { ChatAssistantMessage, ChatSystemMessage, ChatTool, ChatToolMessage, ChatUserMessage } from "@reins/protocol"
import type { ChatMessage } from "@reins/protocol"
import { Either, ParseResult, Schema } from "effect"
import { type ApiError, badRequest, unknownParameter, unsupported } from "../http/errors.js"

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optional(Schema.NullOr(s))
const SafeInt = Schema.Int.pipe(Schema.between(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER))
const PositiveInt = Schema.Int.pipe(Schema.positive())
const Stop = Schema.Union(Schema.String, Schema.Array(Schema.String).pipe(Schema.maxItems(16)))

/** Sampling fields shared by both endpoints. */
const sampling = {
  model: Schema.String,
  temperature: opt(Schema.Number.pipe(Schema.between(0, 2))),
  top_p: opt(Schema.Number.pipe(Schema.between(0, 1))),
  /** vLLM's extension; -1 or 0 disable it. */
  top_k: opt(Schema.Int.pipe(Schema.between(-1, 1_000_000))),
  max_tokens: opt(PositiveInt),
  stop: opt(Stop),
  seed: opt(SafeInt),
  n: opt(PositiveInt),
  stream: opt(Schema.Boolean),
  stream_options: opt(Schema.Struct({ include_usage: Schema.optional(Schema.NullOr(Schema.Boolean)) })),
  frequency_penalty: opt(Schema.Number.pipe(Schema.between(-2, 2))),
  presence_penalty: opt(Schema.Number.pipe(Schema.between(-2, 2))),
  logit_bias: opt(Schema.Record({ key: Schema.String, value: Schema.Number })),
  user: opt(Schema.String),
  /** vLLM's flag; the Gateway always returns token ids. */
  return_token_ids: opt(Schema.Boolean)
}

const ToolChoice = Schema.Union(
  Schema.Literal("none", "auto", "required"),
  Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) })
)

/** `messages` is decoded per message (see `decodeMessages`), for precise error paths. */
const ChatFields = Schema.Struct({
  ...sampling,
  messages: Schema.Array(Schema.Unknown),
  tools: opt(Schema.Array(ChatTool)),
  tool_choice: opt(ToolChoice),
  max_completion_tokens: opt(PositiveInt),
  logprobs: opt(Schema.Boolean),
  top_logprobs: opt(Schema.Int.pipe(Schema.between(0, 20))),
  response_format: opt(Schema.Struct({ type: Schema.String })),
  parallel_tool_calls: opt(Schema.Boolean),
  metadata: opt(Schema.Record({ key: Schema.String, value: Schema.String })),
  store: opt(Schema.Boolean),
  service_tier: opt(Schema.String),
  prompt_cache_key: opt(Schema.String),
  safety_identifier: opt(Schema.String),
  reasoning_effort: opt(Schema.String),
  modalities: opt(Schema.Array(Schema.String)),
  /** vLLM's extension: extra variables for the model's chat template (Qwen3's `enable_thinking`). */
  chat_template_kwargs: opt(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})

export type ChatRequest = Omit<typeof ChatFields.Type, "messages"> & { readonly messages: ReadonlyArray<ChatMessage> }

const TokenIds = Schema.Array(Schema.Int).pipe(Schema.minItems(1))

const CompletionFields = Schema.Struct({
  ...sampling,
  prompt: Schema.Union(
    Schema.String,
    Schema.Array(Schema.String).pipe(Schema.minItems(1)),
    TokenIds,
    Schema.Array(TokenIds).pipe(Schema.minItems(1))
  ),
  logprobs: opt(Schema.Int.pipe(Schema.between(0, 20))),
  echo: opt(Schema.Boolean),
  suffix: opt(Schema.String),
  best_of: opt(PositiveInt)
})

export type CompletionRequest = typeof CompletionFields.Type

const messageSchemas = {
  system: ChatSystemMessage,
  developer: ChatSystemMessage,
  user: ChatUserMessage,
  assistant: ChatAssistantMessage,
  tool: ChatToolMessage
} as const

const pathText = (path: ReadonlyArray<PropertyKey>, prefix = ""): string =>
  path.reduce<string>((acc, k) => (typeof k === "number" ? `${acc}[${k}]` : acc === "" ? String(k) : `${acc}.${String(k)}`), prefix)

const describeIssue = (issue: ParseResult.ArrayFormatterIssue): string => issue.message.replace(/\s+/g, " ")

/** Decodes with a 400 that names the first offending field. */
export const decode = <A, I>(schema: Schema.Schema<A, I>, value: unknown, prefix = ""): Either.Either<A, ApiError> =>
  Schema.decodeUnknownEither(schema, { errors: "first", onExcessProperty: "ignore" })(value).pipe(
    Either.mapLeft((e) => {
      const issue = ParseResult.ArrayFormatter.formatErrorSync(e)[0]
      const param = issue ? pathText(issue.path, prefix) : prefix
      const where = param === "" ? "the request" : `'${param}'`
      if (issue?._tag === "Missing") return badRequest(`Missing required parameter: ${where}.`, param || null, "missing_required_parameter")
      return badRequest(`Invalid value for ${where}: ${issue ? describeIssue(issue) : "does not match the schema"}`, param || null, "invalid_value")
    })
  )

const decodeMessage = (m: unknown, i: number): Either.Either<ChatMessage, ApiError> => {
  const at = `messages[${i}]`
  if (typeof m !== "object" || m === null || Array.isArray(m)) return Either.left(badRequest(`'${at}' must be an object.`, at))
  const role = (m as { role?: unknown }).role
  const schema = typeof role === "string" ? messageSchemas[role as keyof typeof messageSchemas] : undefined
  if (schema === undefined) {
    return Either.left(
      badRequest(`Invalid value for '${at}.role': ${JSON.stringify(role ?? null)}. Supported roles: system, developer, user, assistant, tool.`, `${at}.role`)
    )
  }
  const content = (m as { content?: unknown }).content
  if (Array.isArray(content)) {
    const j = content.findIndex((p) => typeof p !== "object" || p === null || !["text", "refusal"].includes((p as { type?: unknown }).type as string))
    if (j >= 0) {
      const type = (content[j] as { type?: unknown } | null)?.type
      return Either.left(badRequest(`'${at}.content[${j}]': only text content parts are supported (got ${JSON.stringify(type ?? null)}).`, `${at}.content[${j}].type`))
    }
  }
  return Either.flatMap(decode(schema as Schema.Schema<ChatMessage, unknown>, m, at), (message) =>
    message.role === "assistant" && (message.content ?? null) === null && (message.tool_calls ?? []).length === 0
      ? Either.left(badRequest(`'${at}': an assistant message needs 'content' or 'tool_calls'.`, `${at}.content`))
      : Either.right(message)
  )
}

const decodeMessages = (raw: ReadonlyArray<unknown>): Either.Either<Array<ChatMessage>, ApiError> =>
  raw.length === 0 ? Either.left(badRequest("'messages' must contain at least one message.", "messages", "invalid_value")) : Either.all(raw.map(decodeMessage))

export const checkObject = (body: unknown): Either.Either<Record<string, unknown>, ApiError> =>
  typeof body === "object" && body !== null && !Array.isArray(body)
    ? Either.right(body as Record<string, unknown>)
    : Either.left(badRequest("The request body must be a JSON object.", null, "invalid_type"))

export const checkKnown = (body: Record<string, unknown>, known: ReadonlySet<string>): Either.Either<void, ApiError> => {
  for (const key of Object.keys(body)) if (!known.has(key)) return Either.left(unknownParameter(key))
  return Either.void
}

const chatKeys = new Set(Object.keys(ChatFields.fields))
const completionKeys = new Set(Object.keys(CompletionFields.fields))

/** Refuses what would change sampling without being honoured (fields both endpoints share). */
const checkSupported = (r: Pick<CompletionRequest, keyof typeof sampling>): Either.Either<void, ApiError> => {
  if ((r.n ?? 1) > 1) return Either.left(unsupported("Only n=1 is supported: send one request per sample (each is recorded as its own call).", "n"))
  if ((r.frequency_penalty ?? 0) !== 0) return Either.left(unsupported("frequency_penalty is not supported (it would change the recorded sampling distribution).", "frequency_penalty"))
  if ((r.presence_penalty ?? 0) !== 0) return Either.left(unsupported("presence_penalty is not supported (it would change the recorded sampling distribution).", "presence_penalty"))
  if (r.logit_bias && Object.keys(r.logit_bias).length > 0) return Either.left(unsupported("logit_bias is not supported (it would change the recorded sampling distribution).", "logit_bias"))
  if ((r.stream_options ?? null) !== null && r.stream !== true) return Either.left(badRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"))
  return Either.void
}

export const validateChat = (body: unknown): Either.Either<ChatRequest, ApiError> =>
  Either.gen(function* () {
    const obj = yield* checkObject(body)
    yield* checkKnown(obj, chatKeys)
    const fields = yield* decode(ChatFields, obj)
    const messages = yield* decodeMessages(fields.messages)
    yield* checkSupported(fields)
    if (fields.response_format && fields.response_format.type !== "text") {
      return yield* Either.left(unsupported(`response_format '${fields.response_format.type}' is not supported; only 'text'.`, "response_format"))
    }
    if (fields.modalities && fields.modalities.some((m) => m !== "text")) return yield* Either.left(unsupported("Only the 'text' modality is supported.", "modalities"))
    if (fields.tool_choice !== undefined && fields.tool_choice !== null && fields.tool_choice !== "auto" && fields.tool_choice !== "none") {
      return yield* Either.left(unsupported("tool_choice must be 'auto' or 'none' (forcing a tool call needs constrained decoding, which is not supported).", "tool_choice"))
    }
    if ((fields.top_logprobs ?? 0) > 0 && fields.logprobs !== true) {
      return yield* Either.left(badRequest("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs"))
    }
    if (fields.max_tokens != null && fields.max_completion_tokens != null && fields.max_tokens !== fields.max_completion_tokens) {
      return yield* Either.left(badRequest("Set 'max_completion_tokens' or 'max_tokens', not both with different values.", "max_tokens"))
    }
    return { ...fields, messages }
  })

export const validateCompletion = (body: unknown): Either.Either<CompletionRequest, ApiError> =>
  Either.gen(function* () {
    const obj = yield* checkObject(body)
    yield* checkKnown(obj, completionKeys)
    const fields = yield* decode(CompletionFields, obj)
    yield* checkSupported(fields)
    if ((fields.best_of ?? 1) > 1) return yield* Either.left(unsupported("best_of > 1 is not supported.", "best_of"))
    if (fields.echo === true) return yield* Either.left(unsupported("echo is not supported.", "echo"))
    if (fields.suffix) return yield* Either.left(unsupported("suffix is not supported.", "suffix"))
    const p = fields.prompt
    if (Array.isArray(p) && p.length > 1 && (typeof p[0] === "string" || Array.isArray(p[0]))) {
      return yield* Either.left(unsupported("Send one prompt per request (each is recorded as its own call).", "prompt"))
    }
    return fields
  })
