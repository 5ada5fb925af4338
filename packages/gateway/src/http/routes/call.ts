/**
 * The start every model call's route shares: the key's running attempt (401/409), then the body
 * (413/400, recorded against the attempt). `refuse` records an error the route answers with.
 */
import { HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import { runningAttempt } from "../../auth/attempt.js"
import { type CallContext, recordError } from "../../calls/env.js"
import { readJsonText } from "../body.js"
import type { ApiError } from "../errors.js"
import type { AppEnv } from "./env.js"

export const receiveCall = (env: AppEnv, endpoint: CallContext["endpoint"], protocol: CallContext["protocol"]) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const receivedAt = Date.now()
    const attempt = yield* runningAttempt(env.store, request.headers)
    const received: CallContext = { attempt, endpoint, protocol, receivedAt }
    const { text, json: body } = yield* readJsonText(env.config.maxBodyBytes).pipe(Effect.tapError((e) => recordError(env, received, e, null)))
    const ctx: CallContext = { ...received, requestJson: text }
    const refuse = (e: ApiError) => recordError(env, ctx, e, body)
    return { request, attempt, ctx, text, body, refuse }
  })
