/**
 * An external OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI, ...), reached with
 * plain undici (measured 2–3× faster than Effect's HttpClient here) over a keep-alive pool.
 * The Gateway proxies chat/text completions, Responses and Messages to it and records what comes back.
 */
import { Context, Data, Effect, Layer, type Scope } from "effect"
import { Agent, type Dispatcher } from "undici"

export class UpstreamError extends Data.TaggedError("UpstreamError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface UpstreamOptions {
  /** The server's OpenAI base URL, e.g. `http://127.0.0.1:8000/v1` (`/v1` is added to a bare origin). */
  readonly url: string
  /** Sent as `Authorization: Bearer` to the upstream (never the harness's key). */
  readonly apiKey?: string | undefined
  /**
   * Ask the upstream for token ids and logprobs (vLLM: `return_token_ids`, `logprobs`), so the
   * calls are trainable. Only for servers that accept these fields.
   */
  readonly tokenIds?: boolean | undefined
  /** Per-request timeout (headers and body), default 10 minutes. */
  readonly timeoutMs?: number | undefined
}

export interface UpstreamResponse {
  readonly status: number
  readonly contentType: string
  readonly body: Dispatcher.ResponseData["body"]
}

export interface UpstreamService {
  readonly options: UpstreamOptions
  /** The base URL, normalized (no trailing slash). */
  readonly base: string
  /** POSTs JSON text to `path` under the base URL (e.g. `/chat/completions`), with extra headers. Interrupting aborts it. */
  readonly post: (path: string, json: string, extraHeaders?: Readonly<Record<string, string>>) => Effect.Effect<UpstreamResponse, UpstreamError>
  readonly get: (path: string) => Effect.Effect<{ readonly status: number; readonly json: unknown }, UpstreamError>
}

export class Upstream extends Context.Tag("@reins/gateway/Upstream")<Upstream, UpstreamService>() {}

export const normalizeBase = (url: string): string => {
  const u = new URL(url)
  if (u.pathname === "/" || u.pathname === "") u.pathname = "/v1"
  return u.toString().replace(/\/+$/, "")
}

const describe = (e: unknown) => (e instanceof Error ? `${e.message}${(e as { code?: string }).code ? ` (${(e as { code?: string }).code})` : ""}` : String(e))

export const make = (options: UpstreamOptions): Effect.Effect<UpstreamService, UpstreamError, Scope.Scope> =>
  Effect.gen(function* () {
    const base = yield* Effect.try({
      try: () => normalizeBase(options.url),
      catch: (e) => new UpstreamError({ message: `invalid upstream URL ${JSON.stringify(options.url)}: ${describe(e)}` })
    })
    const timeout = options.timeoutMs ?? 600_000
    const agent = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent({ keepAliveTimeout: 30_000, headersTimeout: timeout, bodyTimeout: timeout })),
      (a) => Effect.promise(() => a.close().catch(() => undefined))
    )
    const { origin, pathname } = new URL(base)
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" }
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`

    const post = (path: string, json: string, extraHeaders?: Readonly<Record<string, string>>) =>
      Effect.tryPromise({
        try: (signal) =>
          agent
            .request({ origin, path: pathname + path, method: "POST", headers: extraHeaders ? { ...headers, ...extraHeaders } : headers, body: json, signal })
            .then((r) => ({ status: r.statusCode, contentType: String(r.headers["content-type"] ?? ""), body: r.body })),
        catch: (e) => new UpstreamError({ message: `upstream ${base}${path}: ${describe(e)}`, cause: e })
      })

    const get = (path: string) =>
      Effect.tryPromise({
        try: async (signal) => {
          const r = await agent.request({ origin, path: pathname + path, method: "GET", headers, signal })
          const text = await r.body.text()
          let json: unknown = null
          try {
            json = JSON.parse(text)
          } catch {
            json = { raw: text.slice(0, 1000) }
          }
          return { status: r.statusCode, json }
        },
        catch: (e) => new UpstreamError({ message: `upstream ${base}${path}: ${describe(e)}`, cause: e })
      })

    return { options, base, post, get } satisfies UpstreamService
  })

export const layer = (options: UpstreamOptions): Layer.Layer<Upstream, UpstreamError> => Layer.scoped(Upstream, make(options))
