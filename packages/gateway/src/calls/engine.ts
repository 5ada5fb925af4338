/**
 * Serving a call from the policy engine: pass the pause gate, generate, turn the sampled ids
 * into OpenAI JSON or SSE, record the exact tokens, answer. The record is written before the
 * answer: before the JSON body, or — when streaming — before the chunk that carries the
 * `finish_reason` (and so before `[DONE]`). A harness that goes away mid-call is recorded too
 * (status 499, finish `cancelled`, the tokens sampled so far).
 */
import { HttpServerResponse } from "@effect/platform"
import type { OutputParsers } from "@reins/policy/text"
import { GenerateRequest, type SamplingParams } from "@reins/protocol"
import { Effect, Exit, Stream } from "effect"
import type { Admission, HeldTooLong } from "../gate/PauseGate.js"
import type { GeneratorService } from "../generator/Generator.js"
import { type ApiError, errorBody, heldTooLong, internal, shuttingDown } from "../http/errors.js"
import { DONE, sse, SSE_HEADERS } from "../http/sse.js"
import type { TextCodec } from "../openai/codec.js"
import { type FinalOutput, OutputText } from "../openai/output.js"
import * as R from "../openai/responses.js"
import type { PromptFormat, Reuse } from "../prompt/reuse.js"
import { type CallContext, type CallEnv, recordError, recordServed, Sampled } from "./env.js"

/** Everything decided before generation starts. */
export interface Plan {
  readonly request: unknown
  readonly model: string
  readonly promptIds: Int32Array
  readonly reuse: Reuse
  readonly params: SamplingParams
  readonly stream: boolean
  readonly includeUsage: boolean
  /** Chat with tools: parse tool calls (with `parsers.tool`). */
  readonly parseTools: boolean
  /** The model's output parsers (none for text completions). */
  readonly parsers: OutputParsers
  /** Return logprobs to the client (they are always recorded). */
  readonly returnLogprobs: boolean
  /** For chat: what the next calls of the attempt need to reuse this one. */
  readonly turn: { readonly keys: ReadonlyArray<string>; readonly toolsKey: string } | null
}

const visibleFinish = (engine: string | null, out: FinalOutput) =>
  engine === "length" && !out.stopped ? "length" : out.toolCalls.length > 0 ? "tool_calls" : "stop"

const admit = (env: CallEnv, ctx: CallContext, plan: Plan) =>
  env.gate.enter.pipe(
    Effect.catchTags({
      HeldTooLong: (e: HeldTooLong) => {
        const error = heldTooLong(e.maxHoldSeconds, 5)
        return recordError(env, ctx, error, plan.request, { promptIds: plan.promptIds, reuse: plan.reuse, heldMs: e.maxHoldSeconds * 1000 }).pipe(
          Effect.zipRight(Effect.fail(error))
        )
      },
      GateClosed: () => Effect.fail(shuttingDown())
    })
  )

interface Served {
  readonly env: CallEnv
  readonly ctx: CallContext
  readonly plan: Plan
  readonly format: PromptFormat
  readonly codec: TextCodec
  readonly admission: Admission
  readonly startedAt: number
  readonly sampled: Sampled
  readonly head: R.Head
  /** Set when the call's one record has been claimed (success, failure or cancellation). */
  recorded: boolean
}

const isChat = (s: Served) => s.ctx.endpoint === "chat.completions"

const logprobsOf = (s: Served, ids: Int32Array, lps: Float32Array, topIds: Int32Array | undefined, topLps: Float32Array | undefined, textOffset: number) => {
  if (!s.plan.returnLogprobs) return null
  const t = { ids, logprobs: lps, topIds, topLogprobs: topLps, k: s.plan.params.topLogprobs }
  return isChat(s) ? R.chatLogprobs(s.format.tokenizer, t) : R.completionLogprobs(s.format.tokenizer, t, textOffset)
}

/** The response body as a non-streaming response (what is recorded, streamed or not). */
const responseBody = (s: Served, out: FinalOutput, finish: string) => {
  const { sampled, plan } = s
  const logprobs = logprobsOf(s, sampled.outputIds, sampled.logprobs, sampled.topIds, sampled.topLogprobs, 0)
  return isChat(s)
    ? R.chatCompletion(s.head, { content: out.content, reasoning: out.reasoning, toolCalls: out.toolCalls, finishReason: finish, logprobs, promptIds: plan.promptIds, outputIds: sampled.outputIds })
    : R.textCompletion(s.head, { text: out.content, finishReason: finish, logprobs, promptIds: plan.promptIds, outputIds: sampled.outputIds })
}

/**
 * Records the call — once: the first of success, failure or cancellation wins, and an interrupt
 * (the harness going away) cannot cut a record in half or add a second one.
 */
const record = (s: Served, status: number, body: unknown, out: FinalOutput | null, finish: string | null, error: string | null): Effect.Effect<void, ApiError> =>
  Effect.uninterruptible(
    Effect.suspend(() => {
      if (s.recorded) return Effect.void
      s.recorded = true
      return recordOnce(s, status, body, out, finish, error)
    })
  )

const recordOnce = (s: Served, status: number, body: unknown, out: FinalOutput | null, finish: string | null, error: string | null) =>
  recordServed(s.env, {
    attemptId: s.ctx.attempt.id,
    endpoint: s.ctx.endpoint,
    model: s.plan.model,
    status,
    error,
    request: s.plan.request,
    response: body,
    promptIds: s.plan.promptIds,
    outputIds: s.sampled.outputIds,
    logprobs: s.sampled.logprobs,
    versions: s.sampled.versions,
    finishReason: finish,
    trainable: status === 200,
    reuse: s.plan.reuse,
    timings: {
      receivedAt: s.ctx.receivedAt,
      startedAt: s.startedAt,
      firstTokenAt: s.sampled.firstTokenAt,
      finishedAt: Date.now(),
      heldMs: s.admission.heldMs
    }
  }).pipe(
    Effect.tap((call) =>
      Effect.sync(() => {
        const m = s.env.metrics
        m.tokens.inc({ kind: "prompt" }, s.plan.promptIds.length)
        m.tokens.inc({ kind: "reused" }, s.plan.reuse.reusedTokens)
        m.tokens.inc({ kind: "completion" }, s.sampled.count)
        if (status === 200 && out !== null && s.plan.turn !== null) {
          s.env.conversations.add(s.ctx.attempt.id, {
            callId: call.id,
            keys: s.plan.turn.keys,
            toolsKey: s.plan.turn.toolsKey,
            promptIds: s.plan.promptIds,
            outputIds: s.sampled.outputIds,
            reply: { content: out.content, toolCalls: out.toolCalls, reasoning: out.reasoning },
            exact: true
          })
        }
      })
    ),
    Effect.asVoid
  )

/** The harness went away: keep what was sampled, marked cancelled. */
const recordCancelled = (s: Served) =>
  record(s, 499, null, null, "cancelled", "client closed the request").pipe(Effect.ignore)

const recordFailed = (s: Served, error: ApiError) =>
  record(s, error.status, null, null, null, `${error.code ?? error.type}: ${error.message}`).pipe(Effect.ignore)

const generate = (generator: GeneratorService, plan: Plan) =>
  generator.generate(new GenerateRequest({ requestId: crypto.randomUUID(), promptIds: plan.promptIds, params: plan.params }))

/** Serves one call from the engine; `head` names the response (id, model, fingerprint). */
export const serve = (
  env: CallEnv,
  ctx: CallContext,
  plan: Plan,
  generator: GeneratorService,
  format: PromptFormat,
  codec: TextCodec
): Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError> =>
  Effect.gen(function* () {
    const admission = yield* admit(env, ctx, plan)
    const info = yield* generator.info
    const s: Served = {
      env,
      ctx,
      plan,
      format,
      codec,
      admission,
      startedAt: Date.now(),
      sampled: new Sampled(),
      recorded: false,
      head: {
        id: R.completionId(ctx.endpoint === "chat.completions" ? "chatcmpl" : "cmpl"),
        created: Math.floor(Date.now() / 1000),
        model: plan.model,
        fingerprint: `reins-v${info.version}`
      }
    }
    return plan.stream ? streaming(s, generator) : yield* whole(s, generator)
  })

/** Does the prompt end inside a reasoning block (a generation prompt that writes `<think>`)? */
const opensReasoning = (s: Served): boolean => {
  if (s.plan.parsers.reasoning === "none") return false
  const ids = s.plan.promptIds
  const tail = s.format.tokenizer.decode(ids.subarray(Math.max(0, ids.length - 8)))
  const at = tail.lastIndexOf(s.codec.thinkOpen)
  return at >= 0 && tail.slice(at + s.codec.thinkOpen.length).trim() === ""
}

const outputOptions = (s: Served) => ({ parseTools: s.plan.parseTools, stop: s.plan.params.stop, parsers: s.plan.parsers, reasoningOpen: opensReasoning(s) })

const whole = (s: Served, generator: GeneratorService) => {
  const out = new OutputText(s.format.tokenizer, s.codec, outputOptions(s))
  return generate(generator, s.plan).pipe(
    Stream.runForEach((chunk) =>
      Effect.sync(() => {
        s.sampled.push(chunk)
        out.push(chunk.outputIds)
      })
    ),
    Effect.mapError((e) => internal(`generation failed: ${e.message}`)),
    Effect.tapError((error) => recordFailed(s, error)),
    Effect.flatMap(() => {
      const final = out.finish()
      const finish = visibleFinish(s.sampled.finishReason, final)
      const body = responseBody(s, final, finish)
      return record(s, 200, body, final, finish, null).pipe(Effect.as(HttpServerResponse.unsafeJson(body)))
    }),
    Effect.onInterrupt(() => recordCancelled(s)),
    Effect.ensuring(s.admission.release)
  )
}

const streaming = (s: Served, generator: GeneratorService): HttpServerResponse.HttpServerResponse => {
  const chat = isChat(s)
  const out = new OutputText(s.format.tokenizer, s.codec, outputOptions(s))
  const usageExtra = s.plan.includeUsage ? { usage: null } : {}
  let pendingIds: Array<number> = []
  let pendingLogprobs: Array<unknown> = []
  let textOffset = 0

  const chunkOf = (choice: Record<string, unknown>) => (chat ? R.chatChunk(s.head, choice, usageExtra) : R.textChunk(s.head, choice, usageExtra))
  const takePending = () => {
    const ids = pendingIds
    const lps = pendingLogprobs
    pendingIds = []
    pendingLogprobs = []
    const logprobs = !s.plan.returnLogprobs
      ? null
      : chat
        ? { content: lps, refusal: null }
        : mergeCompletionLogprobs(lps as Array<ReturnType<typeof R.completionLogprobs>>)
    return { token_ids: ids, logprobs }
  }
  const contentChoice = (text: string, reasoning = "") =>
    chat ? { delta: { ...(reasoning === "" ? {} : { reasoning_content: reasoning }), ...(text === "" ? {} : { content: text }) } } : { text }

  const first = chat
    ? [sse(R.chatChunk(s.head, { delta: { role: "assistant", content: "" }, token_ids: [] }, { ...usageExtra, prompt_token_ids: Array.from(s.plan.promptIds) }))]
    : [sse(R.textChunk(s.head, { token_ids: [] }, { ...usageExtra, prompt_token_ids: Array.from(s.plan.promptIds) }))]

  const body = generate(generator, s.plan).pipe(
    Stream.mapConcat((chunk) => {
      s.sampled.push(chunk)
      pendingIds.push(...chunk.outputIds)
      if (s.plan.returnLogprobs) {
        const lp = logprobsOf(s, chunk.outputIds, chunk.logprobs, chunk.topIds, chunk.topLogprobs, textOffset)
        if (chat) pendingLogprobs.push(...(lp as ReturnType<typeof R.chatLogprobs>).content)
        else pendingLogprobs.push(lp)
      }
      const { content, reasoning } = out.push(chunk.outputIds)
      if (content === "" && reasoning === "") return []
      textOffset += content.length
      return [sse(chunkOf({ ...contentChoice(content, reasoning), ...takePending() }))]
    }),
    Stream.concat(
      Stream.fromEffect(
        Effect.suspend(() => {
          const final = out.finish()
          const finish = visibleFinish(s.sampled.finishReason, final)
          return record(s, 200, responseBody(s, final, finish), final, finish, null).pipe(
            Effect.map(() => closing(s, final, finish, chunkOf, takePending, contentChoice))
          )
        })
      ).pipe(Stream.flattenIterables)
    ),
    Stream.catchAll((e) => {
      const error = "_tag" in e && e._tag === "ApiError" ? (e as ApiError) : internal(`generation failed: ${e.message}`)
      return Stream.fromEffect(recordFailed(s, error).pipe(Effect.as(sse(errorBody(error)))))
    })
  )

  const events = Stream.concat(Stream.fromIterable(first), body).pipe(
    Stream.ensuringWith((exit) => Effect.zipRight(Exit.isSuccess(exit) ? Effect.void : recordCancelled(s), s.admission.release))
  )
  return HttpServerResponse.stream(events, { headers: SSE_HEADERS, contentType: "text/event-stream" })
}

/** The chunks after generation: the rest of the content, the tool calls, the finish, usage, `[DONE]`. */
const closing = (
  s: Served,
  final: FinalOutput,
  finish: string,
  chunkOf: (choice: Record<string, unknown>) => unknown,
  takePending: () => { token_ids: Array<number>; logprobs: unknown },
  contentChoice: (text: string, reasoning?: string) => Record<string, unknown>
): Array<Uint8Array> => {
  const events: Array<Uint8Array> = []
  if (final.delta !== "" || final.reasoningDelta !== "") events.push(sse(chunkOf({ ...contentChoice(final.delta, final.reasoningDelta), ...takePending() })))
  if (final.toolCalls.length > 0) {
    const calls = R.toolCallsJson(final.toolCalls).map((c, index) => ({ index, ...c }))
    events.push(sse(chunkOf({ delta: { tool_calls: calls }, ...takePending() })))
  }
  const rest = takePending()
  events.push(sse(chunkOf({ ...(isChat(s) ? { delta: {} } : { text: "" }), ...rest, finish_reason: finish })))
  if (s.plan.includeUsage) {
    const usage = R.usage(s.plan.promptIds.length, s.sampled.count)
    events.push(sse(isChat(s) ? R.chatChunk(s.head, null, { usage }) : R.textChunk(s.head, null, { usage })))
  }
  events.push(DONE)
  return events
}

const mergeCompletionLogprobs = (parts: ReadonlyArray<ReturnType<typeof R.completionLogprobs>>) => ({
  tokens: parts.flatMap((p) => p.tokens),
  token_logprobs: parts.flatMap((p) => p.token_logprobs),
  top_logprobs: parts.some((p) => p.top_logprobs) ? parts.flatMap((p) => p.top_logprobs ?? []) : null,
  text_offset: parts.flatMap((p) => p.text_offset)
})

