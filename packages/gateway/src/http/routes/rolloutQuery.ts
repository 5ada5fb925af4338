/**
 * `GET /api/rollouts` query parameters → a store query. Every parameter is checked and named
 * when wrong (unknown ones too), so a dashboard link with a typo gets a clear 400, never a
 * silently unfiltered table.
 */
import { AttemptState } from "@reins/protocol"
import { Either, Schema } from "effect"
import type { RolloutQuery } from "../../store/Store.js"
import { type ApiError, badRequest, unknownParameter } from "../errors.js"

const KNOWN = ["state", "group", "limit", "cursor", "version", "min_reward", "max_reward"]

/** Rollout ids are `ro_` + hex (see store/ids.ts); the cursor is the last id of the previous page. */
const CURSOR = /^ro_[0-9a-f]{1,64}$/

const integer = (name: string, text: string, min: number, max: number): Either.Either<number, ApiError> => {
  const n = Number(text)
  return text.trim() !== "" && Number.isInteger(n) && n >= min && n <= max
    ? Either.right(n)
    : Either.left(badRequest(`'${name}' must be an integer from ${min} to ${max}; got ${JSON.stringify(text)}.`, name))
}

const finite = (name: string, text: string): Either.Either<number, ApiError> => {
  const n = Number(text)
  return text.trim() !== "" && Number.isFinite(n) ? Either.right(n) : Either.left(badRequest(`'${name}' must be a number; got ${JSON.stringify(text)}.`, name))
}

export const parseRolloutQuery = (q: URLSearchParams): Either.Either<RolloutQuery, ApiError> =>
  Either.gen(function* () {
    for (const key of q.keys()) if (!KNOWN.includes(key)) return yield* Either.left(unknownParameter(key))
    const state = q.get("state") ?? undefined
    if (state !== undefined && !Schema.is(AttemptState)(state)) {
      return yield* Either.left(badRequest(`Invalid 'state' ${JSON.stringify(state)}: one of queued, running, succeeded, failed, cancelled.`, "state"))
    }
    const cursor = q.get("cursor") ?? undefined
    if (cursor !== undefined && !CURSOR.test(cursor)) {
      return yield* Either.left(badRequest(`Invalid 'cursor' ${JSON.stringify(cursor)}: pass the 'next_cursor' of the previous page.`, "cursor"))
    }
    const limit = q.has("limit") ? yield* integer("limit", q.get("limit")!, 1, 500) : undefined
    const version = q.has("version") ? yield* integer("version", q.get("version")!, 0, 2 ** 31 - 1) : undefined
    const minReward = q.has("min_reward") ? yield* finite("min_reward", q.get("min_reward")!) : undefined
    const maxReward = q.has("max_reward") ? yield* finite("max_reward", q.get("max_reward")!) : undefined
    return { state, group: q.get("group") ?? undefined, limit, cursor, version, minReward, maxReward }
  })
