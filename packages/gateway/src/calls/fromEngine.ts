/**
 * Serving a call from the policy engine, whatever its protocol: pass the pause gate, generate,
 * parse the sampled ids (reasoning, tool calls), record the exact tokens, answer through the
 * protocol's encoder. The record is written before the answer: before the JSON body, or — when
 * streaming — before the closing events (the finish). A harness that goes away mid-call is
 * recorded too (status 499, finish `cancelled`, the tokens sampled so far).
 */
import { HttpServerResponse } from "@effect/platform"
import type { OutputParsers } from "@reins/policy/text"
import { GenerateRequest, type SamplingParams } from "@reins/protocol"
import { Effect, Exit, Stream } from "effect"
import type { Admission } from "../gate/PauseGate.js"
import type { GeneratorService, ModelInfo } from "../generator/Generator.js"
import { type ApiError, internal } from "../http/errors.js"
import { SSE_HEADERS } from "../http/sse.js"
import type { TextCodec } from "../openai/codec.js"
import { type FinalOutput, OutputText } from "../openai/output.js"
import type { PromptFormat, Reuse } from "../prompt/reuse.js"
import type { Finish, ReplyEncoder } from "./encoder.js"
import { type CallContext, type CallEnv, recordServed, Sampled } from "./env.js"
import { admit, recordOnce } from "./steps.js"

/** Everything decided before generation starts. */
export interface Plan {
  readonly request: unknown
  readonly model: string
  readonly promptIds: Int32Array
  readonly reuse: Reuse
  readonly params: SamplingParams
  readonly stream: boolean
  /** Chat chunks: end with a usage chunk. */
  readonly includeUsage: boolean
  /** Parse tool calls (with `parsers.tool`). */
  readonly parseTools: boolean
  /** The model's output parsers (none for text completions). */
  readonly parsers: OutputParsers
  /** Return logprobs to the client (they are always recorded). */
  readonly returnLogprobs: boolean
  /** For conversations: what the next calls of the attempt need to reuse this one. */
  readonly turn: { readonly keys: ReadonlyArray<string>; readonly toolsKey: string } | null
}

/** What serves the tokens: the engine with the model's tokenizer, template and parsers. */
export interface EngineParts {
  readonly generator: GeneratorService
  readonly format: PromptFormat
  readonly codec: TextCodec
}

const visibleFinish = (engine: string | null, out: FinalOutput): Finish =>
  engine === "length" && !out.stopped ? "length" : out.toolCalls.length > 0 ? "tool_calls" : "stop"

interface Served {
  readonly env: CallEnv
  readonly ctx: CallContext
  readonly plan: Plan
  readonly parts: EngineParts
  readonly encoder: ReplyEncoder
  readonly admission: Admission
  readonly startedAt: number
  readonly sampled: Sampled
  readonly record: (status: number, body: unknown, out: FinalOutput | null, finish: string | null, error: string | null) => Effect.Effect<void, ApiError>
}

const write = (s: Omit<Served, "record">, status: number, body: unknown, out: FinalOutput | null, finish: string | null, error: string | null) =>
  recordServed(s.env, {
    attemptId: s.ctx.attempt.id,
    endpoint: s.ctx.endpoint,
    protocol: s.ctx.protocol,
    model: s.plan.model,
    status,
    error,
    request: s.plan.request,
    requestJson: s.ctx.requestJson,
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
const recordCancelled = (s: Served) => s.record(499, null, null, "cancelled", "client closed the request").pipe(Effect.ignore)

const recordFailed = (s: Served, error: ApiError) => s.record(error.status, null, null, null, `${error.code ?? error.type}: ${error.message}`).pipe(Effect.ignore)

const generate = (generator: GeneratorService, plan: Plan) =>
  generator.generate(new GenerateRequest({ requestId: crypto.randomUUID(), promptIds: plan.promptIds, params: plan.params }))

/** Serves one call from the engine; `encoder` answers in the call's protocol (made once the served model is known). */
export const serve = (
  env: CallEnv,
  ctx: CallContext,
  plan: Plan,
  parts: EngineParts,
  encoder: (info: ModelInfo) => ReplyEncoder
): Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError> =>
  Effect.gen(function* () {
    const admission = yield* admit(env, ctx, plan.request, { promptIds: plan.promptIds, reuse: plan.reuse })
    const info = yield* parts.generator.info
    const base = { env, ctx, plan, parts, encoder: encoder(info), admission, startedAt: Date.now(), sampled: new Sampled() }
    const s: Served = { ...base, record: recordOnce((status, body, out, finish, error) => write(base, status, body, out, finish, error)) }
    return plan.stream ? streaming(s) : yield* whole(s)
  })

/** Does the prompt end inside a reasoning block (a generation prompt that writes `<think>`)? */
const opensReasoning = (s: Served): boolean => {
  if (s.plan.parsers.reasoning === "none") return false
  const ids = s.plan.promptIds
  const tail = s.parts.format.tokenizer.decode(ids.subarray(Math.max(0, ids.length - 8)))
  const at = tail.lastIndexOf(s.parts.codec.thinkOpen)
  return at >= 0 && tail.slice(at + s.parts.codec.thinkOpen.length).trim() === ""
}

const outputText = (s: Served) =>
  new OutputText(s.parts.format.tokenizer, s.parts.codec, { parseTools: s.plan.parseTools, stop: s.plan.params.stop, parsers: s.plan.parsers, reasoningOpen: opensReasoning(s) })

/** The parsed output with its tool calls named as the protocol names them. */
const finished = (s: Served, out: OutputText) => {
  const parsed = out.finish()
  const output: FinalOutput = { ...parsed, toolCalls: parsed.toolCalls.map((c) => ({ ...c, id: s.encoder.callId(c.id) })) }
  const g = { output, finish: visibleFinish(s.sampled.finishReason, output), promptIds: s.plan.promptIds, sampled: s.sampled }
  return { g, body: s.encoder.body(g) }
}

const whole = (s: Served) => {
  const out = outputText(s)
  return generate(s.parts.generator, s.plan).pipe(
    Stream.runForEach((chunk) =>
      Effect.sync(() => {
        s.sampled.push(chunk)
        out.push(chunk.outputIds)
      })
    ),
    Effect.mapError((e) => internal(`generation failed: ${e.message}`)),
    Effect.tapError((error) => recordFailed(s, error)),
    Effect.flatMap(() => {
      const { g, body } = finished(s, out)
      return s.record(200, body, g.output, g.finish, null).pipe(Effect.as(HttpServerResponse.unsafeJson(body)))
    }),
    Effect.onInterrupt(() => recordCancelled(s)),
    Effect.ensuring(s.admission.release)
  )
}

const streaming = (s: Served): HttpServerResponse.HttpServerResponse => {
  const out = outputText(s)
  const body = generate(s.parts.generator, s.plan).pipe(
    Stream.mapConcat((chunk) => {
      s.sampled.push(chunk)
      return s.encoder.chunk(chunk, out.push(chunk.outputIds))
    }),
    Stream.concat(
      Stream.fromEffect(
        Effect.suspend(() => {
          const { g, body } = finished(s, out)
          return s.record(200, body, g.output, g.finish, null).pipe(Effect.map(() => s.encoder.end(g, body)))
        })
      ).pipe(Stream.flattenIterables)
    ),
    Stream.catchAll((e) => {
      const error = "_tag" in e && e._tag === "ApiError" ? (e as ApiError) : internal(`generation failed: ${e.message}`)
      return Stream.fromEffect(recordFailed(s, error).pipe(Effect.as(s.encoder.error(error)))).pipe(Stream.flattenIterables)
    })
  )
  const events = Stream.concat(Stream.suspend(() => Stream.fromIterable(s.encoder.start())), body).pipe(
    Stream.ensuringWith((exit) => Effect.zipRight(Exit.isSuccess(exit) ? Effect.void : recordCancelled(s), s.admission.release))
  )
  return HttpServerResponse.stream(events, { headers: SSE_HEADERS, contentType: "text/event-stream" })
}
