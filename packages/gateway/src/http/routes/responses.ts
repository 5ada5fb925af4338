/**
 * The OpenAI Responses routes: `POST /v1/responses` (served by the one call pipeline through the
 * Responses codec) and `GET /v1/responses/{id}` (a response of this attempt, from the store).
 * `previous_response_id` names an earlier response of the same attempt; its conversation is
 * rebuilt from the recorded calls, so a harness may send only the new input. In upstream mode the
 * call is relayed to an upstream that serves the Responses API (which keeps its own responses).
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { ChatMessage } from "@reins/protocol"
import { Effect } from "effect"
import { attemptOfKey } from "../../auth/attempt.js"
import { serve } from "../../calls/fromEngine.js"
import { planConversation } from "../../calls/plan.js"
import { relay } from "../../calls/relay.js"
import { relayedResponses } from "../../responses/relayed.js"
import { historyOf, type RecordedResponses, resolveReferences, toConversation } from "../../responses/conversation.js"
import { responseId, responsesEncoder } from "../../responses/encoder.js"
import { type ConversationItem, type ResponsesRequest, validateResponses } from "../../responses/request.js"
import { checkObject } from "../../openai/requests.js"
import { type ApiError, badRequest, internal, notFound } from "../errors.js"
import { receiveCall } from "./call.js"
import type { AppEnv } from "./env.js"

const previousNotFound = (id: string) =>
  badRequest(`Previous response with id '${id}' not found (it belongs to another attempt, was not stored, or failed).`, "previous_response_id", "previous_response_not_found")

/**
 * What the request continues from this attempt's recorded calls: the conversation its
 * `previous_response_id` names, and its `item_reference`s resolved. The calls are read only when
 * the request refers to any.
 */
const continued = (env: AppEnv, attemptId: string, r: ResponsesRequest): Effect.Effect<{ items: Array<ConversationItem>; previous: ReadonlyArray<ChatMessage> }, ApiError> => {
  const id = r.previous_response_id ?? null
  const refers = id !== null || r.input.some((i) => i.type === "item_reference")
  const none = { byId: new Map(), lookup: () => undefined } satisfies RecordedResponses
  return (refers ? env.conversations.responses(attemptId).pipe(Effect.mapError((e) => internal(`the store failed: ${e.message}`))) : Effect.succeed(none)).pipe(
    Effect.flatMap((recorded: RecordedResponses) => {
      const previous = id === null ? undefined : recorded.byId.get(id)
      if (id !== null && (previous === undefined || !previous.stored)) return Effect.fail(previousNotFound(id))
      return Effect.map(resolveReferences(r.input, recorded.lookup), (items) => ({ items, previous: historyOf(previous) }))
    })
  )
}

export const createResponse = (env: AppEnv) =>
  Effect.gen(function* () {
    const { attempt, ctx, text, body, refuse } = yield* receiveCall(env, "responses", "openai")
    const backend = env.backend
    if (backend._tag === "Upstream") {
      return yield* relay(env, ctx, backend.upstream, relayedResponses, yield* checkObject(body).pipe(Effect.tapError(refuse)), text, {})
    }
    const r = yield* validateResponses(body).pipe(Effect.tapError(refuse))
    const { items, previous } = yield* continued(env, attempt.id, r).pipe(Effect.tapError(refuse))
    const info = yield* backend.generator.info
    const plan = yield* planConversation(toConversation(body, r, items, previous), info, env.config.modelAliases, backend.format, env.conversations.turns(attempt.id)).pipe(
      Effect.tapError(refuse)
    )
    return yield* serve(env, ctx, plan, backend, () =>
      responsesEncoder({
        id: responseId(),
        createdAt: Math.floor(Date.now() / 1000),
        model: plan.model,
        body: body as Record<string, unknown>,
        request: r,
        promptIds: plan.promptIds,
        reusedTokens: plan.reuse.reusedTokens,
        tokenizer: backend.format.tokenizer,
        returnLogprobs: plan.returnLogprobs,
        topLogprobs: plan.params.topLogprobs
      }))
  })

/** `GET /v1/responses/{id}`: a stored response of the key's attempt. */
export const getResponse = (env: AppEnv) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const attempt = yield* attemptOfKey(env.store, request.headers)
    const id = decodeURIComponent(new URL(request.url, "http://x").pathname.replace(/^\/v1\/responses\//, ""))
    const recorded = yield* env.conversations.responses(attempt.id).pipe(Effect.mapError((e) => internal(`the store failed: ${e.message}`)))
    const found = recorded.byId.get(id)
    if (found === undefined || !found.stored) return yield* Effect.fail(notFound(`No response with id '${id}' in this attempt.`, "response_not_found"))
    return HttpServerResponse.unsafeJson(found.body)
  })
