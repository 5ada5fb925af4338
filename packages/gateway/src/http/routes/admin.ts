/**
 * The admin API (admin token required): rollouts and attempts, the pause gate, the event
 * stream. Enough to collect calls without a controller:
 * `POST /api/rollouts` → give the key to a harness → `POST /api/attempts/{id}/state`.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { AttemptState, type GatewayState, PauseMode } from "@reins/protocol"
import { Effect, Schedule, Schema, Stream } from "effect"
import { decode } from "../../openai/requests.js"
import { readJson } from "../body.js"
import { type ApiError, badRequest, conflict, internal, notFound, unknownParameter } from "../errors.js"
import { SSE_HEADERS } from "../sse.js"
import type { AppEnv } from "./env.js"
import { attemptJson, callJson, callJsonSafe, eventJson, rewardJson, rolloutJson, rolloutRowJson } from "./json.js"
import { parseRolloutQuery } from "./rolloutQuery.js"

type Headers = Readonly<Record<string, string | undefined>>

/** The admin token; a dashboard session may read (GET) and, where a route says `control`, pause and resume. */
export const admin = <A, E, R>(env: AppEnv, effect: Effect.Effect<A, E, R>, control = false) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    Effect.zipRight(env.checkAdmin(request.headers, control ? "control" : request.method === "GET" ? "read" : "none"), effect))

/** Decodes a JSON body against a struct, naming unknown or invalid fields. */
const body = <A, I>(env: AppEnv, schema: Schema.Schema<A, I> & { readonly fields: Schema.Struct.Fields }, allowEmpty = false) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const empty = request.headers["content-length"] === "0" || (request.headers["content-length"] === undefined && request.headers["transfer-encoding"] === undefined)
    const raw = allowEmpty && empty ? {} : yield* readJson(env.config.maxBodyBytes)
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return yield* Effect.fail(badRequest("The request body must be a JSON object.", null, "invalid_type"))
    for (const k of Object.keys(raw)) if (!(k in schema.fields)) return yield* Effect.fail(unknownParameter(k))
    return yield* decode(schema, raw)
  })

export const storeFailure = (e: { readonly _tag: string; readonly message: string }): ApiError =>
  e._tag === "NotFound" ? notFound(e.message) : e._tag === "IllegalTransition" || e._tag === "Conflict" ? conflict(e.message) : internal(`the store failed: ${e.message}`)

const param = (name: string) => Effect.map(HttpRouter.params, (p) => p[name] ?? "")

const baseUrl = (env: AppEnv, headers: Headers) => env.config.publicUrl ?? `http://${headers["host"] ?? "127.0.0.1"}/v1`

const issued = (env: AppEnv, headers: Headers, r: { rollout: { id: string }; attempt: { id: string }; key: string }) => ({
  rollout_id: r.rollout.id,
  attempt_id: r.attempt.id,
  attempt_key: r.key,
  base_url: baseUrl(env, headers)
})

const NewRolloutBody = Schema.Struct({
  task: Schema.optional(Schema.Unknown),
  group: Schema.optional(Schema.NullOr(Schema.String)),
  /** Start the attempt now (default) or leave it queued. */
  start: Schema.optional(Schema.Boolean)
})

export const createRollout = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const b = yield* body(env, NewRolloutBody)
      const r = yield* env.store.createRollout({ task: b.task ?? null, group: b.group ?? null, start: b.start ?? true }).pipe(Effect.mapError(storeFailure))
      return HttpServerResponse.unsafeJson(issued(env, request.headers, r), { status: 201 })
    })
  )

export const retryRollout = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const b = yield* body(env, Schema.Struct({ start: Schema.optional(Schema.Boolean) }), true)
      const r = yield* env.store.createAttempt(yield* param("id"), { start: b.start ?? true }).pipe(Effect.mapError(storeFailure))
      return HttpServerResponse.unsafeJson(issued(env, request.headers, r), { status: 201 })
    })
  )

export const listRollouts = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const query = yield* parseRolloutQuery(new URL(request.url, "http://x").searchParams)
      const page = yield* env.store.rollouts(query).pipe(Effect.mapError(storeFailure))
      const summaries = yield* env.store.rolloutSummaries(page.rollouts.map((r) => r.id)).pipe(Effect.mapError(storeFailure))
      const byId = new Map(summaries.map((s) => [s.rolloutId, s]))
      return HttpServerResponse.unsafeJson({ object: "list", data: page.rollouts.map((r) => rolloutRowJson(r, byId.get(r.id))), next_cursor: page.next })
    })
  )

export const getRollout = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const d = yield* env.store.rollout(yield* param("id")).pipe(Effect.mapError(storeFailure))
      const view = (calls: typeof d.calls, render: typeof callJson) => ({
        ...rolloutJson(d.rollout),
        attempts: d.attempts.map(attemptJson),
        calls: calls.map(render),
        rewards: d.rewards.map(rewardJson)
      })
      // The common case writes once; only a view that cannot write looks for the call at fault.
      try {
        return HttpServerResponse.text(JSON.stringify(view(d.calls, callJson)), { contentType: "application/json" })
      } catch {
        return HttpServerResponse.unsafeJson(view(d.calls, callJsonSafe))
      }
    })
  )

const StateBody = Schema.Struct({ state: AttemptState, reason: Schema.optional(Schema.NullOr(Schema.String)) })

export const setAttemptState = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const b = yield* body(env, StateBody)
      const a = yield* env.store.transition(yield* param("id"), b.state, b.reason ?? null).pipe(Effect.mapError(storeFailure))
      return HttpServerResponse.unsafeJson(attemptJson(a))
    })
  )

const AdminRewardBody = Schema.Struct({
  reward: Schema.Finite,
  call_id: Schema.optional(Schema.NullOr(Schema.String)),
  info: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })))
})

/** A reward from a verifier (any attempt state: verifiers run after the harness exits). */
export const attemptReward = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const b = yield* body(env, AdminRewardBody)
      const r = yield* env.store
        .addReward({ attemptId: yield* param("id"), value: b.reward, callId: b.call_id ?? null, info: b.info ?? null })
        .pipe(Effect.mapError(storeFailure))
      return HttpServerResponse.unsafeJson({ object: "reward", ...rewardJson(r) }, { status: 201 })
    })
  )

export const stateJson = (s: GatewayState) => ({
  paused: s.paused,
  mode: s.mode,
  held: s.held,
  in_flight: s.inFlight,
  paused_seconds: s.pausedSeconds,
  drain_seconds: s.lastDrainSeconds,
  model: s.modelId,
  version: s.version
})

const gatewayFailure = (e: { readonly message: string }) => internal(`the backend could not do it: ${e.message}`)

export const pause = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const b = yield* body(env, Schema.Struct({ mode: Schema.optional(PauseMode) }), true)
      const s = yield* env.gate.pause(b.mode ?? "drain").pipe(Effect.mapError(gatewayFailure))
      return HttpServerResponse.unsafeJson(stateJson(s))
    }),
    true
  )

export const resume = (env: AppEnv) =>
  admin(env, Effect.map(Effect.mapError(env.gate.resume, gatewayFailure), (s) => HttpServerResponse.unsafeJson(stateJson(s))), true)

export const state = (env: AppEnv) => admin(env, Effect.map(env.gate.state, (s) => HttpServerResponse.unsafeJson(stateJson(s))))

const encoder = new TextEncoder()

/** `GET /api/events?after=SEQ` (or `Last-Event-ID`): the event log, then live events, as SSE. */
export const events = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const q = new URL(request.url, "http://x").searchParams
      const afterText = q.get("after") ?? request.headers["last-event-id"] ?? "0"
      const after = Number(afterText)
      if (!Number.isInteger(after) || after < 0) return yield* Effect.fail(badRequest("'after' must be a non-negative integer event sequence number.", "after"))
      const log = env.store.events(after).pipe(
        Stream.map((e) => encoder.encode(`id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(eventJson(e))}\n\n`)),
        Stream.catchAll((e) => Stream.succeed(encoder.encode(`event: error\ndata: ${JSON.stringify({ error: { message: e.message } })}\n\n`)))
      )
      const heartbeat = Stream.fromSchedule(Schedule.spaced("15 seconds")).pipe(Stream.map(() => encoder.encode(": keep-alive\n\n")))
      const stream = Stream.concat(Stream.succeed(encoder.encode(": reins events\n\n")), Stream.merge(log, heartbeat, { haltStrategy: "left" }))
      return HttpServerResponse.stream(stream, { headers: SSE_HEADERS, contentType: "text/event-stream" })
    })
  )
