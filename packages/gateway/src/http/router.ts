/**
 * The Gateway's HTTP app: every route, OpenAI-shaped errors for everything that goes wrong
 * (unknown routes and unexpected failures included), and request metrics.
 */
import { HttpRouter, type HttpApp, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect } from "effect"
import { type ApiError, internal, toResponse, unknownRoute } from "./errors.js"
import * as Admin from "./routes/admin.js"
import type { AppEnv } from "./routes/env.js"
import * as OpenAI from "./routes/openai.js"

type Handler = Effect.Effect<HttpServerResponse.HttpServerResponse, ApiError, HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext>

/** Errors become OpenAI error responses; defects become 500s (logged); interruptions stay interruptions. */
const handled = (env: AppEnv, route: string, handler: Handler) =>
  Effect.suspend(() => {
    const start = performance.now()
    return handler.pipe(
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const failure = Cause.failureOption(cause)
        if (failure._tag === "Some") return Effect.succeed(toResponse(failure.value))
        return Effect.logError(`${route}: unexpected failure`, cause).pipe(Effect.as(toResponse(internal("Unexpected server error; it was logged."))))
      }),
      Effect.map((response) => {
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

export const makeRouter = (env: AppEnv) => {
  const r = (route: string, handler: Handler) => handled(env, route, handler)
  return HttpRouter.empty.pipe(
    HttpRouter.post("/v1/chat/completions", r("chat.completions", OpenAI.chatCompletions(env))),
    HttpRouter.post("/v1/completions", r("completions", OpenAI.completions(env))),
    HttpRouter.get("/v1/models", r("models", OpenAI.models(env))),
    HttpRouter.get("/v1/models/*", r("model", OpenAI.model(env))),
    HttpRouter.post("/v1/reward", r("reward", OpenAI.reward(env))),
    HttpRouter.post("/api/rollouts", r("api.rollouts.create", Admin.createRollout(env))),
    HttpRouter.get("/api/rollouts", r("api.rollouts.list", Admin.listRollouts(env))),
    HttpRouter.get("/api/rollouts/:id", r("api.rollouts.get", Admin.getRollout(env))),
    HttpRouter.post("/api/rollouts/:id/attempts", r("api.rollouts.retry", Admin.retryRollout(env))),
    HttpRouter.post("/api/attempts/:id/state", r("api.attempts.state", Admin.setAttemptState(env))),
    HttpRouter.post("/api/attempts/:id/reward", r("api.attempts.reward", Admin.attemptReward(env))),
    HttpRouter.post("/api/gateway/pause", r("api.gateway.pause", Admin.pause(env))),
    HttpRouter.post("/api/gateway/resume", r("api.gateway.resume", Admin.resume(env))),
    HttpRouter.get("/api/gateway/state", r("api.gateway.state", Admin.state(env))),
    HttpRouter.get("/api/events", r("api.events", Admin.events(env))),
    HttpRouter.get("/healthz", healthz),
    HttpRouter.get("/metrics", metrics(env))
  )
}

/** The router as an app: unknown routes answer 404 in OpenAI's shape. */
export const makeApp = (env: AppEnv): HttpApp.Default =>
  makeRouter(env).pipe(
    Effect.catchTag("RouteNotFound", (e) =>
      Effect.succeed(toResponse(unknownRoute(e.request.method, new URL(e.request.url, "http://x").pathname)))
    )
  )
