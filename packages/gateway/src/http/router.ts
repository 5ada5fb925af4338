/**
 * The Gateway's HTTP app: every route, errors in the route's protocol shape (OpenAI's, or
 * Anthropic's on the Messages routes) for everything that goes wrong (unexpected failures
 * included; unknown routes get OpenAI's, but Anthropic's under /v1/messages), and request metrics.
 */
import { HttpRouter, type HttpApp, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect } from "effect"
import { toAnthropicResponse } from "../anthropic/errors.js"
import { type ApiError, internal, notFound, toResponse, unknownRoute } from "./errors.js"
import * as Admin from "./routes/admin.js"
import * as Anthropic from "./routes/anthropic.js"
import * as Dashboard from "./routes/dashboard.js"
import type { AppEnv } from "./routes/env.js"
import * as OpenAI from "./routes/openai.js"
import * as Responses from "./routes/responses.js"
import * as Ui from "./routes/ui.js"

type Handler = Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError, HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext>

/**
 * Errors become the route's error responses; defects become 500s (logged); interruptions stay
 * interruptions. `measured` routes count in the request metrics.
 */
const handled = (env: AppEnv, route: string, handler: Handler, measured: boolean, render: (e: ApiError) => HttpServerResponse.HttpServerResponse) =>
  Effect.suspend(() => {
    const start = performance.now()
    return handler.pipe(
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const failure = Cause.failureOption(cause)
        if (failure._tag === "Some") return Effect.succeed(render(failure.value))
        return Effect.logError(`${route}: unexpected failure`, cause).pipe(Effect.as(render(internal("Unexpected server error; it was logged."))))
      }),
      Effect.map((response) => {
        if (!measured) return response
        env.metrics.requests.inc({ route, status: String(response.status) })
        env.metrics.latency.observe({ route }, (performance.now() - start) / 1000)
        return response
      })
    )
  })

const healthz = Effect.succeed(HttpServerResponse.unsafeJson({ status: "ok" }))

const metrics = (env: AppEnv) =>
  Effect.promise(() => env.metrics.registry.metrics()).pipe(
    Effect.map((text) => HttpServerResponse.text(text, { contentType: env.metrics.registry.contentType }))
  )

/**
 * Every route, as data: the router is built from this table, and tests walk it (so a route added
 * here is one the admin-token test tries, without anyone remembering to). `/api/...` routes need
 * the admin token; all but `measured: false` count in the request metrics.
 */
export const routes = [
  { method: "POST", path: "/v1/chat/completions", name: "chat.completions", handler: OpenAI.chatCompletions },
  { method: "POST", path: "/v1/completions", name: "completions", handler: OpenAI.completions },
  { method: "POST", path: "/v1/responses", name: "responses", handler: Responses.createResponse },
  { method: "GET", path: "/v1/responses/:id", name: "responses.get", handler: Responses.getResponse },
  { method: "POST", path: "/v1/messages", name: "messages", handler: Anthropic.messages, errors: "anthropic" },
  { method: "POST", path: "/v1/messages/count_tokens", name: "messages.count_tokens", handler: Anthropic.countTokens, errors: "anthropic" },
  { method: "GET", path: "/v1/models", name: "models", handler: OpenAI.models },
  { method: "GET", path: "/v1/models/*", name: "model", handler: OpenAI.model },
  { method: "POST", path: "/v1/reward", name: "reward", handler: OpenAI.reward },
  { method: "POST", path: "/api/rollouts", name: "api.rollouts.create", handler: Admin.createRollout },
  { method: "GET", path: "/api/rollouts", name: "api.rollouts.list", handler: Admin.listRollouts },
  { method: "GET", path: "/api/rollouts/:id", name: "api.rollouts.get", handler: Admin.getRollout },
  { method: "GET", path: "/api/rollouts/:id/tokens", name: "api.rollouts.tokens", handler: Dashboard.rolloutTokens },
  { method: "POST", path: "/api/rollouts/:id/attempts", name: "api.rollouts.retry", handler: Admin.retryRollout },
  { method: "POST", path: "/api/attempts/:id/state", name: "api.attempts.state", handler: Admin.setAttemptState },
  { method: "GET", path: "/api/attempts/:id/logs", name: "api.attempts.logs", handler: Dashboard.attemptLogs },
  { method: "POST", path: "/api/attempts/:id/reward", name: "api.attempts.reward", handler: Admin.attemptReward },
  { method: "POST", path: "/api/gateway/pause", name: "api.gateway.pause", handler: Admin.pause },
  { method: "POST", path: "/api/gateway/resume", name: "api.gateway.resume", handler: Admin.resume },
  { method: "GET", path: "/api/gateway/state", name: "api.gateway.state", handler: Admin.state },
  { method: "GET", path: "/api/events", name: "api.events", handler: Admin.events },
  { method: "GET", path: "/api/versions", name: "api.versions", handler: Dashboard.versions },
  { method: "GET", path: "/api/cluster", name: "api.cluster", handler: Dashboard.cluster },
  { method: "GET", path: "/ui", name: "ui", handler: Ui.index, measured: false, errors: "html" },
  { method: "POST", path: "/ui/login", name: "ui.login", handler: Ui.login, measured: false, errors: "html" },
  { method: "POST", path: "/ui/logout", name: "ui.logout", handler: Ui.logout, measured: false, errors: "html" },
  { method: "GET", path: "/ui/assets/*", name: "ui.assets", handler: Ui.asset, measured: false, errors: "html" },
  { method: "GET", path: "/ui/vendor/*", name: "ui.vendor", handler: Ui.vendor, measured: false, errors: "html" },
  { method: "GET", path: "/healthz", name: "healthz", handler: () => healthz, measured: false },
  { method: "GET", path: "/metrics", name: "metrics", handler: metrics, measured: false }
] as const satisfies ReadonlyArray<{
  readonly method: "GET" | "POST"
  readonly path: `/${string}`
  readonly name: string
  readonly handler: (env: AppEnv) => Handler
  readonly measured?: false
  /** The error shape of the route's protocol (default OpenAI's); the dashboard's pages answer HTML. */
  readonly errors?: "anthropic" | "html"
}>

const renderer = (errors: "anthropic" | "html" | undefined) =>
  errors === "anthropic" ? toAnthropicResponse : errors === "html" ? Ui.toHtmlResponse : toResponse

export const makeRouter = (env: AppEnv) =>
  routes.reduce<HttpRouter.HttpRouter>(
    (router, route) =>
      HttpRouter.route(route.method)(
        router,
        route.path,
        handled(env, route.name, route.handler(env), !("measured" in route), renderer("errors" in route ? route.errors : undefined))
      ),
    HttpRouter.empty
  )

/**
 * The router as an app: unknown routes answer 404 in OpenAI's shape, except under `/v1/messages`,
 * where an Anthropic client (e.g. a newer SDK's `/v1/messages/batches`) reads Anthropic's.
 */
export const makeApp = (env: AppEnv): HttpApp.Default =>
  makeRouter(env).pipe(
    Effect.catchTag("RouteNotFound", (e) => {
      const path = new URL(e.request.url, "http://x").pathname
      const error = unknownRoute(e.request.method, path)
      if (path === "/ui/" || path.startsWith("/ui/")) return Effect.succeed(Ui.toHtmlResponse(notFound(`The dashboard has no page ${path}; its pages start at /ui.`)))
      return Effect.succeed(path === "/v1/messages" || path.startsWith("/v1/messages/") ? toAnthropicResponse(error) : toResponse(error))
    })
  )
