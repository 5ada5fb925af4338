/**
 * Relaying a Responses or Messages call to an upstream that speaks the protocol itself (vLLM
 * serves both): the body goes as received, the answer comes back as the upstream wrote it, and
 * the call is recorded before the answer is released — before the JSON body, or, when streaming,
 * before the final events (`response.completed`, or `message_delta` and `message_stop`); earlier
 * events flow through as they arrive. Such an upstream returns no token ids on these protocols,
 * so the calls are recorded as not trainable (chat completions, which can carry ids, go through
 * calls/upstream.ts).
 */
import { HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import type { UpstreamService } from "../generator/Upstream.js"
import { type ApiError, upstreamError } from "../http/errors.js"
import { type CallContext, type CallEnv, EMPTY_FLOAT, EMPTY_INT, NO_REUSE, recordServed } from "./env.js"
import { answeringJson, isEventStream, postUpstream, readAnswer, relayEvents, sseData } from "./forward.js"
import { admitForUpstream, recordOnce } from "./steps.js"

type Json = Record<string, any>

/** What the relay needs to know of a protocol. */
export interface RelayedProtocol {
  readonly path: string
  /** The finish (as recorded: stop, length, tool_calls) of a final response body. */
  readonly finishOf: (response: Json) => string | null
  /** Reads a stream: `add` returns true from the event on which the answer must wait for the record. */
  readonly gather: () => { readonly add: (data: Json) => boolean; readonly response: () => Json | null }
  /** The body an error is answered with when the upstream's own answer is not usable. */
  readonly errorBody: (e: ApiError) => unknown
  /** One stream event that tells the client the call failed. */
  readonly errorEvent: (e: ApiError) => string
}

const dataOf = (event: string): Json | null => {
  try {
    const json: unknown = JSON.parse(sseData(event))
    return typeof json === "object" && json !== null ? (json as Json) : null
  } catch {
    return null
  }
}

/** Relays one call; `text` is the request body as received (`body` parsed), recorded as is. */
export const relay = (
  env: CallEnv,
  ctx: CallContext,
  upstream: UpstreamService,
  protocol: RelayedProtocol,
  body: Json,
  text: string,
  headers: Readonly<Record<string, string>>
): Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError> =>
  Effect.gen(function* () {
    const { admission, model } = yield* admitForUpstream(env, ctx, body)
    const startedAt = Date.now()
    let firstEventAt: number | null = null
    const record = recordOnce((status: number, response: Json | null, error: string | null, responseJson?: string) =>
      recordServed(env, {
        attemptId: ctx.attempt.id,
        endpoint: ctx.endpoint,
        protocol: ctx.protocol,
        model,
        status,
        error,
        request: body,
        requestJson: text,
        response,
        responseJson,
        promptIds: EMPTY_INT,
        outputIds: EMPTY_INT,
        logprobs: EMPTY_FLOAT,
        versions: EMPTY_INT,
        finishReason: status === 200 && response !== null ? protocol.finishOf(response) : null,
        trainable: false,
        reuse: NO_REUSE,
        timings: { receivedAt: ctx.receivedAt, startedAt, firstTokenAt: firstEventAt, finishedAt: Date.now(), heldMs: admission.heldMs }
      }).pipe(Effect.asVoid)
    )
    const res = yield* postUpstream(env, ctx, admission, body, startedAt, upstream.post(protocol.path, text, headers))
    if (isEventStream(body, res)) {
      const gathered = protocol.gather()
      const onEvent = (event: string) => {
        firstEventAt ??= Date.now()
        const data = dataOf(event)
        return { out: event, hold: data !== null && gathered.add(data) }
      }
      return relayEvents(res, onEvent, record, gathered.response, protocol.errorEvent, admission.release)
    }
    return yield* Effect.gen(function* () {
      const { answer, json } = yield* readAnswer(res)
      firstEventAt = Date.now()
      if (res.status !== 200 || json === null || typeof json !== "object") {
        // The upstream speaks the protocol: its own error body is passed on as it is.
        const own = json !== null && typeof json === "object" && json.error !== undefined
        const error = upstreamError(`upstream answered ${res.status}: ${answer.slice(0, 500)}`)
        yield* record(own ? res.status : 502, null, `upstream: ${own ? JSON.stringify(json!.error).slice(0, 500) : error.message}`).pipe(Effect.ignore)
        return own
          ? HttpServerResponse.text(answer, { status: res.status, contentType: "application/json" })
          : HttpServerResponse.unsafeJson(protocol.errorBody(error), { status: 502 })
      }
      yield* record(200, json, null, answer)
      return HttpServerResponse.text(answer, { contentType: "application/json" })
    }).pipe(answeringJson(record, admission.release))
  })
