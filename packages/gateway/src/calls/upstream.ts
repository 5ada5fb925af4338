/**
 * Serving a call by proxying it to an external OpenAI-compatible server. The harness's request
 * goes through as it is (optionally asking the upstream for token ids and logprobs); the answer
 * comes back as the upstream wrote it. The call is recorded before the answer is released:
 * before the JSON body, or — when streaming — before the chunk with `finish_reason` and `[DONE]`
 * (earlier chunks flow through as they arrive). Without token ids and logprobs from the upstream
 * the call is recorded as not trainable.
 */
import { HttpServerResponse } from "@effect/platform"
import type { ChatMessage } from "@reins/protocol"
import { Effect } from "effect"
import type { UpstreamResponse, UpstreamService } from "../generator/Upstream.js"
import { type ApiError, errorBody, upstreamError } from "../http/errors.js"
import { messageKeys, toolsKey } from "../prompt/keys.js"
import { classifyBreak, findMatch, type Reuse, type Turn } from "../prompt/reuse.js"
import { type CallContext, type CallEnv, EMPTY_FLOAT, EMPTY_INT, NO_REUSE, recordServed } from "./env.js"
import { answeringJson, isEventStream, postUpstream, readAnswer, type RecordForwarded, relayEvents, sseData } from "./forward.js"
import { admitForUpstream, recordOnce } from "./steps.js"

type Json = Record<string, any>

/** What the upstream returned, gathered from a JSON body or from stream chunks. */
class Gathered {
  content = ""
  toolCalls: Array<{ id: string; type: string; function: { name: string; arguments: string } }> = []
  finishReason: string | null = null
  promptIds: Array<number> | null = null
  outputIds: Array<number> = []
  logprobs: Array<number> = []
  usage: unknown = null
  id: string | null = null
  model: string | null = null
  created: number | null = null
  firstTokenAt: number | null = null

  constructor(readonly chat: boolean) {}

  addChunk(chunk: Json) {
    this.id ??= chunk.id ?? null
    this.model ??= chunk.model ?? null
    this.created ??= chunk.created ?? null
    if (Array.isArray(chunk.prompt_token_ids)) this.promptIds = chunk.prompt_token_ids
    if (chunk.usage) this.usage = chunk.usage
    const choice = chunk.choices?.[0]
    if (!choice) return
    const piece = this.chat ? choice.delta?.content : choice.text
    if (typeof piece === "string" && piece !== "") {
      this.firstTokenAt ??= Date.now()
      this.content += piece
    }
    if (Array.isArray(choice.prompt_token_ids)) this.promptIds = choice.prompt_token_ids
    if (Array.isArray(choice.token_ids)) this.outputIds.push(...choice.token_ids)
    this.addLogprobs(choice.logprobs)
    for (const d of choice.delta?.tool_calls ?? []) {
      const at = typeof d.index === "number" ? d.index : this.toolCalls.length
      const call = (this.toolCalls[at] ??= { id: "", type: "function", function: { name: "", arguments: "" } })
      if (d.id) call.id = d.id
      if (d.function?.name) call.function.name += d.function.name
      if (d.function?.arguments) call.function.arguments += d.function.arguments
    }
    if (choice.finish_reason) this.finishReason = choice.finish_reason
  }

  addBody(body: Json) {
    this.id = body.id ?? null
    this.model = body.model ?? null
    this.created = body.created ?? null
    this.usage = body.usage ?? null
    if (Array.isArray(body.prompt_token_ids)) this.promptIds = body.prompt_token_ids
    const choice = body.choices?.[0]
    if (!choice) return
    this.content = (this.chat ? choice.message?.content : choice.text) ?? ""
    this.toolCalls = choice.message?.tool_calls ?? []
    this.finishReason = choice.finish_reason ?? null
    if (Array.isArray(choice.prompt_token_ids)) this.promptIds = choice.prompt_token_ids
    if (Array.isArray(choice.token_ids)) this.outputIds = [...choice.token_ids]
    this.addLogprobs(choice.logprobs)
  }

  private addLogprobs(lp: Json | null | undefined) {
    if (!lp) return
    if (Array.isArray(lp.content)) for (const t of lp.content) this.logprobs.push(Number(t.logprob))
    else if (Array.isArray(lp.token_logprobs)) for (const v of lp.token_logprobs) this.logprobs.push(Number(v))
  }

  get trainable() {
    return this.promptIds !== null && this.promptIds.length > 0 && this.outputIds.length > 0 && this.logprobs.length === this.outputIds.length
  }

  /** The equivalent non-streaming response (what is recorded). */
  response(): Json {
    const message = { role: "assistant", content: this.toolCalls.length > 0 && this.content === "" ? null : this.content, ...(this.toolCalls.length ? { tool_calls: this.toolCalls } : {}) }
    return {
      id: this.id,
      object: this.chat ? "chat.completion" : "text_completion",
      created: this.created,
      model: this.model,
      choices: [this.chat ? { index: 0, message, finish_reason: this.finishReason } : { index: 0, text: this.content, finish_reason: this.finishReason }],
      usage: this.usage
    }
  }
}

const path = (ctx: CallContext) => (ctx.endpoint === "chat.completions" ? "/chat/completions" : "/completions")

/**
 * The JSON text to send: the harness's own body as it came, unless ids and logprobs are to be
 * asked for. Returns also what to strip before the harness sees the answer.
 */
const forwardBody = (upstream: UpstreamService, ctx: CallContext, body: Json, text: string) => {
  if (!upstream.options.tokenIds) return { forward: text, stripLogprobs: false }
  const chat = ctx.endpoint === "chat.completions"
  const asked = chat ? body.logprobs === true : typeof body.logprobs === "number"
  const forward = { ...body, return_token_ids: true, logprobs: chat ? true : Math.max(1, Number(body.logprobs ?? 0)) }
  return { forward: JSON.stringify(forward), stripLogprobs: !asked }
}

const stripChoiceLogprobs = (json: Json) => {
  for (const c of json.choices ?? []) if (c && typeof c === "object") c.logprobs = null
  return json
}

/** How the prompt relates to the attempt's earlier calls (from the upstream's own ids). */
const reuseOf = (turns: ReadonlyArray<Turn>, body: Json, g: Gathered): { reuse: Reuse; keys: Array<string> | null; tk: string } => {
  try {
    if (!g.chat || !Array.isArray(body.messages)) return { reuse: NO_REUSE, keys: null, tk: "" }
    const messages = body.messages as Array<ChatMessage>
    const keys = messageKeys(messages)
    const tk = toolsKey(body.tools)
    const match = findMatch(turns, messages, keys, tk)
    if (match !== null && g.promptIds !== null) {
      const prefix = [...match.turn.promptIds, ...(match.retry ? [] : match.turn.outputIds)]
      const extends_ = prefix.every((id, i) => g.promptIds![i] === id)
      return { reuse: extends_ ? { reusedTokens: prefix.length, fromCallId: match.turn.callId, break: null } : { reusedTokens: 0, fromCallId: null, break: "retokenized" }, keys, tk }
    }
    const latest = turns[turns.length - 1]
    return { reuse: { reusedTokens: 0, fromCallId: null, break: latest ? classifyBreak(latest, messages, keys, tk) : null }, keys, tk }
  } catch {
    return { reuse: NO_REUSE, keys: null, tk: "" }
  }
}

/** Proxies one call; `text` is the request body as received (`body` parsed), recorded as is. */
export const proxy = (
  env: CallEnv,
  ctx: CallContext,
  upstream: UpstreamService,
  body: Json,
  text: string
): Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError> =>
  Effect.gen(function* () {
    const { admission, model } = yield* admitForUpstream(env, ctx, body)
    const startedAt = Date.now()
    const turns = ctx.endpoint === "chat.completions" ? yield* env.conversations.turns(ctx.attempt.id) : []
    const { forward, stripLogprobs } = forwardBody(upstream, ctx, body, text)
    const g = new Gathered(ctx.endpoint === "chat.completions")

    const record = recordOnce((status: number, response: unknown, error: string | null, responseJson?: string): Effect.Effect<void, ApiError> => {
      const { reuse, keys, tk } = reuseOf(turns, body, g)
      const outputIds = Int32Array.from(g.outputIds)
      const trainable = status === 200 && g.trainable
      return recordServed(env, {
        attemptId: ctx.attempt.id,
        endpoint: ctx.endpoint,
        protocol: ctx.protocol,
        model,
        status,
        error,
        request: body,
        response,
        // Both bodies are stored as they crossed the wire rather than re-serialized.
        requestJson: text,
        responseJson,
        promptIds: g.promptIds ? Int32Array.from(g.promptIds) : EMPTY_INT,
        outputIds,
        logprobs: g.logprobs.length === g.outputIds.length ? Float32Array.from(g.logprobs) : EMPTY_FLOAT,
        versions: new Int32Array(outputIds.length),
        finishReason: status === 200 ? g.finishReason : null,
        trainable,
        reuse,
        timings: { receivedAt: ctx.receivedAt, startedAt, firstTokenAt: g.firstTokenAt, finishedAt: Date.now(), heldMs: admission.heldMs }
      }).pipe(
        Effect.tap((call) =>
          Effect.sync(() => {
            env.metrics.tokens.inc({ kind: "completion" }, g.outputIds.length)
            if (status === 200 && keys !== null) {
              env.conversations.add(ctx.attempt.id, {
                callId: call.id,
                keys,
                toolsKey: tk,
                promptIds: g.promptIds ? Int32Array.from(g.promptIds) : EMPTY_INT,
                outputIds,
                reply: { content: g.content, toolCalls: g.toolCalls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) },
                exact: trainable
              })
            }
          })
        ),
        Effect.asVoid
      )
    })

    const res = yield* postUpstream(env, ctx, admission, body, startedAt, upstream.post(path(ctx), forward))
    if (isEventStream(body, res)) return relay(res, g, stripLogprobs, record, admission.release)

    return yield* Effect.gen(function* () {
      const { answer, json } = yield* readAnswer(res)
      if (res.status !== 200 || json === null || typeof json !== "object") {
        const error =
          json?.error && typeof json.error === "object"
            ? { status: res.status, body: json }
            : { status: res.status === 200 ? 502 : res.status, body: errorBody(upstreamError(`upstream answered ${res.status}: ${answer.slice(0, 500)}`)) }
        const message = String(error.body.error?.message ?? "upstream error")
        yield* record(error.status, null, `upstream: ${message}`).pipe(Effect.ignore)
        return HttpServerResponse.unsafeJson(error.body, { status: error.status })
      }
      g.addBody(json)
      g.firstTokenAt = Date.now()
      yield* record(200, json, null, answer)
      return stripLogprobs
        ? HttpServerResponse.unsafeJson(stripChoiceLogprobs(json))
        : HttpServerResponse.text(answer, { contentType: "application/json" })
    }).pipe(answeringJson(record, admission.release))
  })

/**
 * Relays an SSE stream: events flow through as they arrive, except the one with the
 * `finish_reason` and everything after it, which wait until the call is recorded.
 */
const relay = (
  res: UpstreamResponse,
  g: Gathered,
  stripLogprobs: boolean,
  record: RecordForwarded,
  release: Effect.Effect<void>
): HttpServerResponse.HttpServerResponse => {
  const onEvent = (event: string) => {
    const data = sseData(event)
    let out = event
    let hold = data === "[DONE]"
    if (data !== "" && data !== "[DONE]") {
      try {
        const chunk = JSON.parse(data) as Json
        g.addChunk(chunk)
        if (chunk.choices?.some((c: Json) => c?.finish_reason)) hold = true
        if (stripLogprobs) out = `data: ${JSON.stringify(stripChoiceLogprobs(chunk))}`
      } catch {
        // not JSON: pass it through untouched
      }
    }
    return { out, hold }
  }
  return relayEvents(res, onEvent, record, () => g.response(), (error) => `data: ${JSON.stringify(errorBody(error))}\n\n`, release)
}
