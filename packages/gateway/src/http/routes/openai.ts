/**
 * The agent-facing OpenAI routes: `/v1/chat/completions`, `/v1/completions`, `/v1/models`,
 * `/v1/models/{id}` and `/v1/reward`. Order of checks, as OpenAI does: key (401/409), body
 * (413, 400), schema (400), model (404), context (400). Every call that reaches a running
 * attempt is recorded, failed ones included.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Either, Schema } from "effect"
import { attemptOfKey, runningAttempt } from "../../auth/attempt.js"
import { serve } from "../../calls/fromEngine.js"
import { planChat, planCompletion } from "../../calls/plan.js"
import { proxy } from "../../calls/upstream.js"
import { chatEncoder, completionEncoder } from "../../openai/encoders.js"
import { checkObject } from "../../openai/requests.js"
import { completionId } from "../../openai/responses.js"
import { readJson } from "../body.js"
import { type ApiError, badRequest, internal, modelNotFound, notFound, unknownParameter } from "../errors.js"
import { receiveCall } from "./call.js"
import type { AppEnv } from "./env.js"
import { rewardJson } from "./json.js"

const completionRoute = (env: AppEnv, endpoint: "chat.completions" | "completions") =>
  Effect.gen(function* () {
    const { attempt, ctx, text, body, refuse } = yield* receiveCall(env, endpoint, "openai")
    const backend = env.backend
    if (backend._tag === "Upstream") {
      return yield* proxy(env, ctx, backend.upstream, yield* checkObject(body).pipe(Effect.tapError(refuse)), text)
    }
    const info = yield* backend.generator.info
    const plan = yield* (endpoint === "chat.completions"
      ? planChat(body, info, env.config.modelAliases, backend.format, env.conversations.turns(attempt.id))
      : planCompletion(body, info, env.config.modelAliases, backend.format)
    ).pipe(Effect.tapError(refuse))
    const makeEncoder = endpoint === "chat.completions" ? chatEncoder : completionEncoder
    return yield* serve(env, ctx, plan, backend, (info) =>
      makeEncoder({
        head: { id: completionId(endpoint === "chat.completions" ? "chatcmpl" : "cmpl"), created: Math.floor(Date.now() / 1000), model: plan.model, fingerprint: `reins-v${info.version}` },
        promptIds: plan.promptIds,
        tokenizer: backend.format.tokenizer,
        returnLogprobs: plan.returnLogprobs,
        topLogprobs: plan.params.topLogprobs,
        includeUsage: plan.includeUsage
      }))
  })

export const chatCompletions = (env: AppEnv) => completionRoute(env, "chat.completions")
export const completions = (env: AppEnv) => completionRoute(env, "completions")

const modelJson = (id: string, created: number, contextLength: number) => ({
  id,
  object: "model",
  created,
  owned_by: "reins",
  max_model_len: contextLength
})

/** Listing models needs a known key (any attempt state) or the admin token. */
const modelsAuth = (env: AppEnv) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    env.checkAdmin(request.headers).pipe(Effect.orElse(() => attemptOfKey(env.store, request.headers)))
  )

const listModels = (env: AppEnv): Effect.Effect<ReadonlyArray<Record<string, unknown>>, ApiError> => {
  const backend = env.backend
  if (backend._tag === "Upstream") {
    return backend.upstream.get("/models").pipe(
      Effect.mapError((e) => internal(e.message)),
      Effect.map((r) => {
        const data = (r.json as { data?: unknown })?.data
        return Array.isArray(data) ? (data as Array<Record<string, unknown>>) : []
      })
    )
  }
  return Effect.map(backend.generator.info, (info) => [
    modelJson(info.id, info.created, info.contextLength),
    ...env.config.modelAliases.map((a) => modelJson(a, info.created, info.contextLength))
  ])
}

export const models = (env: AppEnv) =>
  Effect.gen(function* () {
    yield* modelsAuth(env)
    const data = yield* listModels(env)
    return HttpServerResponse.unsafeJson({ object: "list", data })
  })

export const model = (env: AppEnv) =>
  Effect.gen(function* () {
    yield* modelsAuth(env)
    const request = yield* HttpServerRequest.HttpServerRequest
    const id = decodeURIComponent(new URL(request.url, "http://x").pathname.replace(/^\/v1\/models\//, ""))
    const found = (yield* listModels(env)).find((m) => m.id === id)
    if (found === undefined) return yield* Effect.fail(modelNotFound(id))
    return HttpServerResponse.unsafeJson(found)
  })

const RewardBody = Schema.Struct({
  reward: Schema.Finite,
  call_id: Schema.optional(Schema.NullOr(Schema.String)),
  info: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })))
})
const rewardKeys = new Set(Object.keys(RewardBody.fields))

/** `POST /v1/reward`: `{"reward": number, "call_id"?: string, "info"?: {...}}` with the attempt key. */
export const reward = (env: AppEnv) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const attempt = yield* runningAttempt(env.store, request.headers)
    const body = yield* readJson(env.config.maxBodyBytes)
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      return yield* Effect.fail(badRequest("The request body must be a JSON object like {\"reward\": 1}.", null, "invalid_type"))
    }
    for (const k of Object.keys(body)) if (!rewardKeys.has(k)) return yield* Effect.fail(unknownParameter(k))
    const decoded = Schema.decodeUnknownEither(RewardBody)(body)
    if (Either.isLeft(decoded)) {
      const raw = (body as { reward?: unknown }).reward
      const param = raw === undefined || typeof raw !== "number" || !Number.isFinite(raw) ? "reward" : Object.keys(body).find((k) => k !== "reward") ?? null
      return yield* Effect.fail(
        badRequest(
          param === "reward" ? "'reward' must be a finite number." : "'call_id' must be a string and 'info' an object.",
          param,
          raw === undefined ? "missing_required_parameter" : "invalid_value"
        )
      )
    }
    const saved = yield* env.store.addReward({ attemptId: attempt.id, value: decoded.right.reward, callId: decoded.right.call_id ?? null, info: decoded.right.info ?? null }).pipe(
      Effect.catchTag("NotFound", (e) => Effect.fail(notFound(`No ${e.entity} ${e.id} in this attempt.`, e.entity === "call" ? "call_not_found" : "not_found"))),
      Effect.catchTag("StoreError", (e) => Effect.fail(internal(`the reward could not be recorded: ${e.message}`)))
    )
    return HttpServerResponse.unsafeJson({ object: "reward", ...rewardJson(saved) })
  })
