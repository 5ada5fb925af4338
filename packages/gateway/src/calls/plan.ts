/**
 * From a decoded request to a generation plan for the engine: the model check, the prompt ids
 * (with exact-token reuse for conversations), the context-length check, the sampling params.
 * Every protocol's request decodes to one `Conversation` (step 2 of a call); from there the plan
 * is the same whatever the protocol.
 */
import type { ChatMessage, ChatTool } from "@reins/protocol"
import { SamplingParams } from "@reins/protocol"
import { Effect, Either } from "effect"
import type { ModelInfo } from "../generator/Generator.js"
import { type ApiError, badRequest, contextLengthExceeded, modelNotFound } from "../http/errors.js"
import { type ChatRequest, type CompletionRequest, validateChat, validateCompletion } from "../openai/requests.js"
import { type BuiltPrompt, buildPrompt, type PromptFormat, type Turn } from "../prompt/reuse.js"
import type { Plan } from "./fromEngine.js"
import { NO_REUSE } from "./env.js"

/** The sampling a request asks for (null: the default). */
export interface Sampling {
  /** The most tokens to generate (null: the model's default, or what the context leaves). */
  readonly maxTokens: number | null
  readonly temperature: number | null | undefined
  readonly topP: number | null | undefined
  readonly topK: number | null | undefined
  readonly seed: number | null | undefined
  readonly stop: ReadonlyArray<string>
  /** Alternatives per token to return (the sampled token's logprob is always recorded). */
  readonly topLogprobs: number
  /**
   * `maxTokens` is a cap, cut to what the context leaves rather than refused (Anthropic's required
   * `max_tokens` is set by harnesses for a hosted model's much larger context).
   */
  readonly capToContext?: boolean | undefined
}

/** One internal conversation: what a chat, Responses or Messages request decodes to. */
export interface Conversation {
  /** The request as it crossed the wire (recorded). */
  readonly request: unknown
  readonly model: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools: ReadonlyArray<ChatTool> | undefined
  /** Tools offered and not refused by the tool choice: parse the reply for calls. */
  readonly parseTools: boolean
  /** Extra variables for the model's chat template (vLLM's `chat_template_kwargs`). */
  readonly templateKwargs: Readonly<Record<string, unknown>> | undefined
  readonly sampling: Sampling
  readonly stream: boolean
  readonly includeUsage: boolean
  readonly returnLogprobs: boolean
}

const stopList = (stop: string | ReadonlyArray<string> | null | undefined): Array<string> =>
  stop == null ? [] : typeof stop === "string" ? [stop] : [...stop]

const samplingParams = (r: Sampling, info: ModelInfo, promptLength: number, defaultMax = Infinity): Either.Either<SamplingParams, ApiError> => {
  const requested = r.maxTokens !== null && r.capToContext === true ? Math.min(r.maxTokens, info.contextLength - promptLength) : r.maxTokens
  if (promptLength >= info.contextLength) return Either.left(contextLengthExceeded(info.contextLength, promptLength, null))
  if (requested !== null && promptLength + requested > info.contextLength) {
    return Either.left(contextLengthExceeded(info.contextLength, promptLength, requested))
  }
  return Either.right(
    new SamplingParams({
      maxTokens: requested ?? Math.min(defaultMax, info.defaultMaxTokens ?? Infinity, info.contextLength - promptLength),
      temperature: r.temperature ?? 1,
      topP: r.topP ?? 1,
      topK: (r.topK ?? 0) > 0 ? r.topK! : 0,
      seed: r.seed ?? undefined,
      stop: [...r.stop],
      topLogprobs: r.topLogprobs
    })
  )
}

const openAiSampling = (r: ChatRequest | CompletionRequest, maxTokens: number | null, topLogprobs: number): Sampling => ({
  maxTokens,
  temperature: r.temperature,
  topP: r.top_p,
  topK: r.top_k,
  seed: r.seed,
  stop: stopList(r.stop),
  topLogprobs
})

/** A text completion is the model's raw text: no reasoning split, no calls. */
const NO_PARSERS = { tool: "none", reasoning: "none" } as const

/** `ChatTemplateRaised`: the template's `raise_exception` refused the conversation (the request's fault). */
const isRaised = (e: unknown): e is { readonly templateMessage: string } =>
  typeof e === "object" && e !== null && (e as { _tag?: string })._tag === "ChatTemplateRaised"

export const checkModel = (model: string, info: ModelInfo, aliases: ReadonlyArray<string>): Either.Either<void, ApiError> =>
  model === info.id || aliases.includes(model) ? Either.void : Either.left(modelNotFound(model))

/** A validated chat request as the internal conversation. */
export const chatConversation = (body: unknown, r: ChatRequest): Conversation => ({
  request: body,
  model: r.model,
  messages: r.messages,
  tools: r.tools ?? undefined,
  parseTools: (r.tools?.length ?? 0) > 0 && r.tool_choice !== "none",
  templateKwargs: r.chat_template_kwargs ?? undefined,
  sampling: openAiSampling(r, r.max_completion_tokens ?? r.max_tokens ?? null, r.logprobs ? (r.top_logprobs ?? 0) : 0),
  stream: r.stream === true,
  includeUsage: r.stream === true && r.stream_options?.include_usage === true,
  returnLogprobs: r.logprobs === true
})

/** The conversation's prompt ids, reusing the attempt's earlier exact ids where it extends one of its calls. */
export const renderPrompt = (c: Conversation, format: PromptFormat, history: ReadonlyArray<Turn>): Effect.Effect<BuiltPrompt, ApiError> =>
  Effect.try({
    try: () => buildPrompt(format, history, c.messages, c.tools, c.templateKwargs),
    catch: (e) =>
      isRaised(e)
        ? badRequest(`The model's chat template refused the conversation: ${e.templateMessage}`, "messages")
        : badRequest(`The messages cannot be rendered by the model's chat template: ${e instanceof Error ? e.message : String(e)}`, "messages")
  })

/**
 * A conversation → plan: the prompt reuses the attempt's earlier exact ids where the
 * conversation extends one of its calls. Fails with the ApiError to answer (the caller records it).
 */
export const planConversation = (
  c: Conversation,
  info: ModelInfo,
  aliases: ReadonlyArray<string>,
  format: PromptFormat,
  turns: Effect.Effect<ReadonlyArray<Turn>>
): Effect.Effect<Plan, ApiError> =>
  Effect.gen(function* () {
    yield* checkModel(c.model, info, aliases)
    const built = yield* renderPrompt(c, format, yield* turns)
    const params = yield* samplingParams(c.sampling, info, built.promptIds.length)
    return {
      request: c.request,
      model: c.model,
      promptIds: built.promptIds,
      reuse: built.reuse,
      params,
      stream: c.stream,
      includeUsage: c.includeUsage,
      parseTools: c.parseTools,
      parsers: format.template.parsers,
      returnLogprobs: c.returnLogprobs,
      turn: { keys: built.keys, toolsKey: built.toolsKey }
    } satisfies Plan
  })

/** A chat request → plan. */
export const planChat = (
  body: unknown,
  info: ModelInfo,
  aliases: ReadonlyArray<string>,
  format: PromptFormat,
  turns: Effect.Effect<ReadonlyArray<Turn>>
): Effect.Effect<Plan, ApiError> =>
  Effect.flatMap(validateChat(body), (r) => planConversation(chatConversation(body, r), info, aliases, format, turns))

/** A text completion request → plan. The prompt text may contain control tokens (as written). */
export const planCompletion = (body: unknown, info: ModelInfo, aliases: ReadonlyArray<string>, format: PromptFormat): Effect.Effect<Plan, ApiError> =>
  Effect.gen(function* () {
    const r = yield* validateCompletion(body)
    yield* checkModel(r.model, info, aliases)
    const p = r.prompt
    const first = Array.isArray(p) ? p[0]! : p
    let promptIds: Int32Array
    if (typeof first === "string") {
      promptIds = format.tokenizer.encode(first, { allowSpecial: true })
    } else {
      const ids: ReadonlyArray<number> = typeof first === "number" ? (p as ReadonlyArray<number>) : first
      const bad = ids.findIndex((id) => id < 0 || id >= format.tokenizer.vocabSize)
      if (bad >= 0) return yield* Effect.fail(badRequest(`Token id ${ids[bad]} at prompt[${bad}] is outside the vocabulary (0..${format.tokenizer.vocabSize - 1}).`, "prompt"))
      promptIds = Int32Array.from(ids)
    }
    if (promptIds.length === 0) return yield* Effect.fail(badRequest("The prompt is empty.", "prompt"))
    // OpenAI's default for /v1/completions is 16 tokens.
    const params = yield* samplingParams(openAiSampling(r, r.max_tokens ?? null, r.logprobs ?? 0), info, promptIds.length, 16)
    return {
      request: body,
      model: r.model,
      promptIds,
      reuse: NO_REUSE,
      params,
      stream: r.stream === true,
      includeUsage: r.stream === true && r.stream_options?.include_usage === true,
      parseTools: false,
      parsers: NO_PARSERS,
      returnLogprobs: r.logprobs != null,
      turn: null
    } satisfies Plan
  })
