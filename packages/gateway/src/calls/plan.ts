/**
 * From a validated OpenAI request to a generation plan for the engine: the model check, the
 * prompt ids (with exact-token reuse for chat), the context-length check, the sampling params.
 */
import { SamplingParams } from "@reins/protocol"
import { Effect, Either } from "effect"
import type { ModelInfo } from "../generator/Generator.js"
import { type ApiError, badRequest, contextLengthExceeded, modelNotFound } from "../http/errors.js"
import { type ChatRequest, type CompletionRequest, validateChat, validateCompletion } from "../openai/requests.js"
import { buildPrompt, type PromptFormat, type Turn } from "../prompt/reuse.js"
import type { Plan } from "./engine.js"
import { NO_REUSE } from "./env.js"

const stopList = (stop: string | ReadonlyArray<string> | null | undefined): Array<string> =>
  stop == null ? [] : typeof stop === "string" ? [stop] : [...stop]

const sampling = (
  r: ChatRequest | CompletionRequest,
  info: ModelInfo,
  promptLength: number,
  requested: number | null,
  topLogprobs: number,
  defaultMax = Infinity
): Either.Either<SamplingParams, ApiError> => {
  if (promptLength >= info.contextLength) return Either.left(contextLengthExceeded(info.contextLength, promptLength, null))
  if (requested !== null && promptLength + requested > info.contextLength) {
    return Either.left(contextLengthExceeded(info.contextLength, promptLength, requested))
  }
  return Either.right(
    new SamplingParams({
      maxTokens: requested ?? Math.min(defaultMax, info.defaultMaxTokens ?? Infinity, info.contextLength - promptLength),
      temperature: r.temperature ?? 1,
      topP: r.top_p ?? 1,
      topK: (r.top_k ?? 0) > 0 ? r.top_k! : 0,
      seed: r.seed ?? undefined,
      stop: stopList(r.stop),
      topLogprobs
    })
  )
}

/** A text completion is the model's raw text: no reasoning split, no calls. */
const NO_PARSERS = { tool: "none", reasoning: "none" } as const

/** `ChatTemplateRaised`: the template's `raise_exception` refused the conversation (the request's fault). */
const isRaised = (e: unknown): e is { readonly templateMessage: string } =>
  typeof e === "object" && e !== null && (e as { _tag?: string })._tag === "ChatTemplateRaised"

const checkModel = (model: string, info: ModelInfo, aliases: ReadonlyArray<string>): Either.Either<void, ApiError> =>
  model === info.id || aliases.includes(model) ? Either.void : Either.left(modelNotFound(model))

/** A chat request → plan. Fails with the ApiError to answer (the caller records it). */
export const planChat = (
  body: unknown,
  info: ModelInfo,
  aliases: ReadonlyArray<string>,
  format: PromptFormat,
  turns: Effect.Effect<ReadonlyArray<Turn>>
): Effect.Effect<Plan, ApiError> =>
  Effect.gen(function* () {
    const r = yield* validateChat(body)
    yield* checkModel(r.model, info, aliases)
    const history = yield* turns
    const parseTools = (r.tools?.length ?? 0) > 0 && r.tool_choice !== "none"
    const built = yield* Effect.try({
      try: () => buildPrompt(format, history, r.messages, r.tools ?? undefined, r.chat_template_kwargs ?? undefined),
      catch: (e) =>
        isRaised(e)
          ? badRequest(`The model's chat template refused the conversation: ${e.templateMessage}`, "messages")
          : badRequest(`The messages cannot be rendered by the model's chat template: ${e instanceof Error ? e.message : String(e)}`, "messages")
    })
    const requested = r.max_completion_tokens ?? r.max_tokens ?? null
    const params = yield* sampling(r, info, built.promptIds.length, requested, r.logprobs ? (r.top_logprobs ?? 0) : 0)
    return {
      request: body,
      model: r.model,
      promptIds: built.promptIds,
      reuse: built.reuse,
      params,
      stream: r.stream === true,
      includeUsage: r.stream === true && r.stream_options?.include_usage === true,
      parseTools,
      parsers: format.template.parsers,
      returnLogprobs: r.logprobs === true,
      turn: { keys: built.keys, toolsKey: built.toolsKey }
    } satisfies Plan
  })

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
    const params = yield* sampling(r, info, promptIds.length, r.max_tokens ?? null, r.logprobs ?? 0, 16)
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
