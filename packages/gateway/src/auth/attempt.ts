/**
 * Agent-facing auth: the attempt key (`Authorization: Bearer <key>` or `x-api-key: <key>`)
 * routes a call to its attempt. Unknown key → 401; an attempt that has ended → 409. A queued
 * attempt starts (→ running) on its first call, so a launcher may hand out the key before it
 * has marked the attempt running.
 */
import type { Attempt } from "@reins/protocol"
import { Effect, Option } from "effect"
import { type ApiError, attemptFinished, internal, unauthorized } from "../http/errors.js"
import type { StoreService } from "../store/Store.js"

export const keyFromHeaders = (headers: Readonly<Record<string, string | undefined>>): string | null => {
  const auth = headers["authorization"]
  if (auth !== undefined) {
    const m = /^\s*bearer\s+(\S+)\s*$/i.exec(auth)
    if (m) return m[1]!
  }
  const key = headers["x-api-key"]
  return key !== undefined && key.trim() !== "" ? key.trim() : null
}

/** The attempt a key belongs to, whatever its state (for read-only routes). */
export const attemptOfKey = (store: StoreService, headers: Readonly<Record<string, string | undefined>>): Effect.Effect<Attempt, ApiError> => {
  const key = keyFromHeaders(headers)
  if (key === null) return Effect.fail(unauthorized("You didn't provide an API key. Send the attempt key as `Authorization: Bearer <key>` or `x-api-key`."))
  return store.attemptByKey(key).pipe(
    Effect.mapError((e) => internal(`the store failed: ${e.message}`)),
    Effect.flatMap(Option.match({ onNone: () => Effect.fail(unauthorized()), onSome: Effect.succeed }))
  )
}

/** The running attempt a key belongs to (starting it if it is queued). */
export const runningAttempt = (store: StoreService, headers: Readonly<Record<string, string | undefined>>): Effect.Effect<Attempt, ApiError> =>
  Effect.flatMap(attemptOfKey(store, headers), (attempt) => {
    if (attempt.state === "running") return Effect.succeed(attempt)
    if (attempt.state !== "queued") return Effect.fail(attemptFinished(attempt.id, attempt.state))
    return store.transition(attempt.id, "running", "first model call").pipe(
      // A concurrent first call may have started it already.
      Effect.catchTag("IllegalTransition", () => store.attempt(attempt.id)),
      Effect.mapError((e) => internal(`the store failed: ${e.message}`)),
      Effect.flatMap((a) => (a.state === "running" ? Effect.succeed(a) : Effect.fail(attemptFinished(a.id, a.state))))
    )
  })
