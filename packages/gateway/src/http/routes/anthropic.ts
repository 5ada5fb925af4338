/**
 * The Anthropic Messages routes: `POST /v1/messages` (served by the one call pipeline through the
 * Messages codec) and `POST /v1/messages/count_tokens` (the prompt's length as this call would
 * render it, reusing the attempt's earlier ids; not a model call, so not recorded). The attempt
 * key comes as `x-api-key` or `Authorization: Bearer`; `anthropic-version` and `anthropic-beta`
 * are accepted whatever their value. Errors are answered in Anthropic's shape (the router renders
 * them, see `errors: "anthropic"` in its table). In upstream mode a message call is relayed to an
 * upstream that serves Messages.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { messagesEncoder, messageId } from "../../anthropic/encoder.js"
import { toConversation } from "../../anthropic/conversation.js"
import { validateCountTokens, validateMessages } from "../../anthropic/request.js"
import { attemptOfKey } from "../../auth/attempt.js"
import { serve } from "../../calls/fromEngine.js"
import { checkModel, planConversation, renderPrompt } from "../../calls/plan.js"
import { relay } from "../../calls/relay.js"
import { relayedMessages } from "../../anthropic/relayed.js"
import { checkObject } from "../../openai/requests.js"
import { readJson } from "../body.js"
import { unsupported } from "../errors.js"
import { receiveCall } from "./call.js"
import type { AppEnv } from "./env.js"

const upstreamRefusal = () => unsupported("count_tokens is served from the policy engine only (this Gateway proxies an upstream).", "model")

/** What an Anthropic upstream reads: the protocol version and betas the harness asked for, and the upstream's own key. */
const upstreamHeaders = (incoming: Readonly<Record<string, string | undefined>>, apiKey: string | undefined): Record<string, string> => ({
  "anthropic-version": incoming["anthropic-version"] ?? "2023-06-01",
  ...(incoming["anthropic-beta"] !== undefined ? { "anthropic-beta": incoming["anthropic-beta"] } : {}),
  ...(apiKey ? { "x-api-key": apiKey } : {})
})

export const messages = (env: AppEnv) =>
  Effect.gen(function* () {
    const { request, attempt, ctx, text, body, refuse } = yield* receiveCall(env, "messages", "anthropic")
    const backend = env.backend
    if (backend._tag === "Upstream") {
      const object = yield* checkObject(body).pipe(Effect.tapError(refuse))
      return yield* relay(env, ctx, backend.upstream, relayedMessages, object, text, upstreamHeaders(request.headers, backend.upstream.options.apiKey))
    }
    const r = yield* validateMessages(body).pipe(Effect.tapError(refuse))
    const info = yield* backend.generator.info
    const plan = yield* planConversation(toConversation(body, r), info, env.config.modelAliases, backend.format, env.conversations.turns(attempt.id)).pipe(
      Effect.tapError(refuse)
    )
    return yield* serve(env, ctx, plan, backend, () => messagesEncoder({ id: messageId(), model: plan.model, promptIds: plan.promptIds }))
  })

export const countTokens = (env: AppEnv) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const attempt = yield* attemptOfKey(env.store, request.headers)
    const body = yield* readJson(env.config.maxBodyBytes)
    const backend = env.backend
    if (backend._tag === "Upstream") return yield* Effect.fail(upstreamRefusal())
    const r = yield* validateCountTokens(body)
    yield* checkModel(r.model, yield* backend.generator.info, env.config.modelAliases)
    const built = yield* renderPrompt(toConversation(body, r), backend.format, yield* env.conversations.turns(attempt.id))
    return HttpServerResponse.unsafeJson({ input_tokens: built.promptIds.length })
  })
