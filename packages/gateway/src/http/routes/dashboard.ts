/**
 * The narrower admin reads the dashboard and `reins rollouts` need beyond admin.ts: a rollout's
 * token view (segments with every token's role, text, logprob and version) and the published
 * model versions. Admin token (or dashboard session) required, like every `/api` route.
 */
import { HttpRouter, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { rolloutSegments, type ViewSegment } from "../../dashboard/tokenView.js"
import { type TokenText, tokenTextOf } from "../../dashboard/tokenText.js"
import { admin, storeFailure } from "./admin.js"
import type { AppEnv } from "./env.js"

const segmentJson = (s: ViewSegment, text: TokenText | null) => ({
  attempt_id: s.attemptId,
  index: s.index,
  start: s.start,
  tokens: s.tokenIds.length,
  action_tokens: s.roles.filter((r) => r === "action").length,
  token_ids: s.tokenIds,
  text: text === null ? null : s.tokenIds.map(text),
  roles: s.roles,
  logprobs: s.logprobs,
  versions: s.versions,
  calls: s.calls.map((c) => ({
    call_id: c.callId,
    seq: c.seq,
    start: c.start,
    end: c.end,
    reused_tokens: c.reusedTokens,
    reused_from: c.reusedFrom,
    finish_reason: c.finishReason,
    trained: c.trained === null ? null : { version: c.trained.version, advantage: c.trained.advantage, loss_weight: c.trained.weight, tokens: c.trained.tokens }
  })),
  advantages: s.advantages,
  loss_weights: s.weights
})

/** `GET /api/rollouts/:id/tokens`: the token view of a rollout. */
export const rolloutTokens = (env: AppEnv) => {
  const text = tokenTextOf(env.backend)
  return admin(
    env,
    Effect.gen(function* () {
      const id = (yield* HttpRouter.params)["id"] ?? ""
      const d = yield* env.store.rolloutTrace(id).pipe(Effect.mapError(storeFailure))
      const trained = yield* env.store.trainedCalls(id).pipe(Effect.mapError(storeFailure))
      const segments = rolloutSegments(d.attempts, d.calls, trained)
      return HttpServerResponse.unsafeJson({
        object: "rollout.tokens",
        rollout_id: d.rollout.id,
        has_text: text !== null,
        segments: segments.map((s) => segmentJson(s, text))
      })
    })
  )
}

/** `GET /api/versions`: every model version the Gateway has served, oldest first. */
export const versions = (env: AppEnv) =>
  admin(
    env,
    Effect.map(Effect.mapError(env.store.modelVersions, storeFailure), (vs) =>
      HttpServerResponse.unsafeJson({
        object: "list",
        data: vs.map((v) => ({ version: v.version, model: v.modelId, info: v.info, created_at: v.createdAt }))
      }))
  )

/** `GET /api/cluster`: nodes (roles, address, up/down, since) and launchers (running and free slots). */
export const cluster = (env: AppEnv) => admin(env, Effect.map(env.cluster, (c) => HttpServerResponse.unsafeJson(c)))

/**
 * `GET /api/attempts/:id/logs`: the tails of the attempt's captured logs, from the launcher that
 * ran it (`available: false` and `reason` say why there are none to show).
 */
export const attemptLogs = (env: AppEnv) =>
  admin(
    env,
    Effect.gen(function* () {
      const id = (yield* HttpRouter.params)["id"] ?? ""
      const attempt = yield* env.store.attempt(id).pipe(Effect.mapError(storeFailure))
      const { logs, reason } = yield* env.attemptLogs(attempt.id)
      return HttpServerResponse.unsafeJson({ object: "attempt.logs", attempt_id: attempt.id, available: logs.length > 0, reason, logs })
    })
  )
