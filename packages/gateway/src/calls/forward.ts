/**
 * What proxying chat (calls/upstream.ts) and relaying Responses/Messages (calls/relay.ts) share:
 * the POST to the upstream, reading its JSON answer, and passing its SSE stream through while
 * the events that must wait for the record are held back.
 */
import { HttpServerResponse } from "@effect/platform"
import { Effect, Exit, Stream } from "effect"
import type { Admission } from "../gate/PauseGate.js"
import type { UpstreamError, UpstreamResponse } from "../generator/Upstream.js"
import { type ApiError, upstreamError } from "../http/errors.js"
import { SSE_HEADERS } from "../http/sse.js"
import { type CallContext, type CallEnv, recordError } from "./env.js"

type Json = Record<string, any>

/** A call's record as the forwarding paths write it (the first write wins, see `recordOnce`). */
export type RecordForwarded = (status: number, response: Json | null, error: string | null) => Effect.Effect<void, ApiError>

/** The upstream's answer; a request that fails is recorded and releases the admission. */
export const postUpstream = (
  env: CallEnv,
  ctx: CallContext,
  admission: Admission,
  body: Json,
  startedAt: number,
  post: Effect.Effect<UpstreamResponse, UpstreamError>
): Effect.Effect<UpstreamResponse, ApiError> =>
  post.pipe(
    Effect.mapError((e) => upstreamError(e.message)),
    Effect.tapError((error) => Effect.zipRight(recordError(env, ctx, error, body, { heldMs: admission.heldMs, startedAt }), admission.release)),
    Effect.onInterrupt(() => admission.release)
  )

/** Whether the upstream answered the stream that was asked for (rather than an error body). */
export const isEventStream = (body: Json, res: UpstreamResponse): boolean =>
  body.stream === true && res.status === 200 && res.contentType.includes("text/event-stream")

/** The upstream's answer as text, and parsed (null when it is not JSON). */
export const readAnswer = (res: UpstreamResponse): Effect.Effect<{ readonly answer: string; readonly json: Json | null }, ApiError> =>
  Effect.map(
    Effect.tryPromise({ try: () => res.body.text(), catch: (e) => upstreamError(`reading the upstream response failed: ${String(e)}`) }),
    (answer) => {
      let json: Json | null = null
      try {
        json = JSON.parse(answer) as Json
      } catch {
        json = null
      }
      return { answer, json }
    }
  )

/** The `data:` lines of one SSE event, joined. */
export const sseData = (event: string): string =>
  event
    .split(/\r?\n/)
    .filter((l) => l.startsWith("data:"))
    .map((l) => l.slice(5).trimStart())
    .join("\n")

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

const encoder = new TextEncoder()

/**
 * Relays an SSE stream: events flow through as they arrive (as `onEvent` rewrites them), except
 * the first one `onEvent` says to hold and everything after it, which wait until the call is
 * recorded. A failed stream is recorded and ends with `errorEvent`; a stream the client leaves
 * is recorded 499. `release` runs at the end either way.
 */
export const relayEvents = (
  res: UpstreamResponse,
  onEvent: (event: string) => { readonly out: string; readonly hold: boolean },
  record: RecordForwarded,
  response: () => Json | null,
  errorEvent: (e: ApiError) => string,
  release: Effect.Effect<void>
): HttpServerResponse.HttpServerResponse => {
  const split = sseSplitter()
  let holding = false
  const held: Array<string> = []
  const pass = (event: string): Array<Uint8Array> => {
    const { out, hold } = onEvent(event)
    if (hold) holding = true
    if (holding) {
      held.push(out + "\n\n")
      return []
    }
    return [encoder.encode(out + "\n\n")]
  }
  const events = Stream.fromAsyncIterable(res.body as AsyncIterable<Uint8Array>, (e) => upstreamError(`the upstream stream failed: ${String(e)}`)).pipe(
    Stream.mapConcat((bytes) => split.push(bytes).flatMap(pass)),
    Stream.concat(
      Stream.fromEffect(
        Effect.suspend(() => {
          split.rest().forEach(pass)
          return record(200, response(), null).pipe(Effect.map(() => held.map((e) => encoder.encode(e))))
        })
      ).pipe(Stream.flattenIterables)
    ),
    Stream.catchAll((error) =>
      Stream.fromEffect(record(error.status, null, `${error.code ?? error.type}: ${error.message}`).pipe(Effect.ignore, Effect.as(encoder.encode(errorEvent(error)))))
    ),
    Stream.ensuringWith((exit) => Effect.zipRight(Exit.isSuccess(exit) ? Effect.void : record(499, response(), "client closed the request").pipe(Effect.ignore), release))
  )
  return HttpServerResponse.stream(events, { headers: SSE_HEADERS, contentType: "text/event-stream" })
}

/** The JSON answer's path: a client that leaves before it is answered is recorded 499; the admission is released at the end. */
export const answeringJson =
  (record: RecordForwarded, release: Effect.Effect<void>) =>
  <A>(answer: Effect.Effect<A, ApiError>): Effect.Effect<A, ApiError> =>
    answer.pipe(
      Effect.onInterrupt(() => record(499, null, "client closed the request").pipe(Effect.ignore)),
      Effect.ensuring(release)
    )
