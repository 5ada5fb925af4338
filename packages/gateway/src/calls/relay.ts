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
import { Effect, Exit, Stream } from "effect"
import type { UpstreamResponse, UpstreamService } from "../generator/Upstream.js"
import { type ApiError, upstreamError } from "../http/errors.js"
import { SSE_HEADERS } from "../http/sse.js"
import { type CallContext, type CallEnv, EMPTY_FLOAT, EMPTY_INT, NO_REUSE, recordError, recordServed } from "./env.js"
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

const encoder = new TextEncoder()

/** Splits an SSE byte stream into events (the text between blank lines). */
const sseSplitter = () => {
  const decoder = new TextDecoder()
  let buffer = ""
  return {
    push: (bytes: Uint8Array): Array<string> => {
      buffer += decoder.decode(bytes, { stream: true })
      const out: Array<string> = []
      for (;;) {
        const m = /\r?\n\r?\n/.exec(buffer)
        if (m === null) return out
        const event = buffer.slice(0, m.index)
        buffer = buffer.slice(m.index + m[0].length)
        if (event.trim() !== "") out.push(event)
      }
    },
    rest: (): Array<string> => (buffer.trim() === "" ? [] : [buffer])
  }
}

const dataOf = (event: string): Json | null => {
  const data = event
    .split(/\r?\n/)
    .filter((l) => l.startsWith("data:"))
    .map((l) => l.slice(5).trimStart())
    .join("\n")
  try {
    const json: unknown = JSON.parse(data)
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
    const res = yield* upstream.post(protocol.path, text, headers).pipe(
      Effect.mapError((e) => upstreamError(e.message)),
      Effect.tapError((error) => Effect.zipRight(recordError(env, ctx, error, body, { heldMs: admission.heldMs, startedAt }), admission.release)),
      Effect.onInterrupt(() => admission.release)
    )
    if (body.stream === true && res.status === 200 && res.contentType.includes("text/event-stream")) {
      return relayStream(res, protocol, record, admission.release, () => (firstEventAt ??= Date.now()))
    }
    return yield* Effect.gen(function* () {
      const answer = yield* Effect.tryPromise({ try: () => res.body.text(), catch: (e) => upstreamError(`reading the upstream response failed: ${String(e)}`) })
      firstEventAt = Date.now()
      let json: Json | null = null
      try {
        json = JSON.parse(answer) as Json
      } catch {
        json = null
      }
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
    }).pipe(
      Effect.onInterrupt(() => record(499, null, "client closed the request").pipe(Effect.ignore)),
      Effect.ensuring(admission.release)
    )
  })

const relayStream = (
  res: UpstreamResponse,
  protocol: RelayedProtocol,
  record: (status: number, response: Json | null, error: string | null) => Effect.Effect<void, ApiError>,
  release: Effect.Effect<void>,
  touched: () => void
): HttpServerResponse.HttpServerResponse => {
  const split = sseSplitter()
  const gathered = protocol.gather()
  let holding = false
  const held: Array<string> = []
  const onEvent = (event: string): Array<Uint8Array> => {
    touched()
    const data = dataOf(event)
    if (data !== null && gathered.add(data)) holding = true
    if (holding) {
      held.push(event + "\n\n")
      return []
    }
    return [encoder.encode(event + "\n\n")]
  }
  const events = Stream.fromAsyncIterable(res.body as AsyncIterable<Uint8Array>, (e) => upstreamError(`the upstream stream failed: ${String(e)}`)).pipe(
    Stream.mapConcat((bytes) => split.push(bytes).flatMap(onEvent)),
    Stream.concat(
      Stream.fromEffect(
        Effect.suspend(() => {
          split.rest().forEach(onEvent)
          return record(200, gathered.response(), null).pipe(Effect.map(() => held.map((e) => encoder.encode(e))))
        })
      ).pipe(Stream.flattenIterables)
    ),
    Stream.catchAll((error) =>
      Stream.fromEffect(record(error.status, null, `${error.code ?? error.type}: ${error.message}`).pipe(Effect.ignore, Effect.as(encoder.encode(protocol.errorEvent(error)))))
    ),
    Stream.ensuringWith((exit) => Effect.zipRight(Exit.isSuccess(exit) ? Effect.void : record(499, gathered.response(), "client closed the request").pipe(Effect.ignore), release))
  )
  return HttpServerResponse.stream(events, { headers: SSE_HEADERS, contentType: "text/event-stream" })
}
