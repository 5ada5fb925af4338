/**
 * The steps every model call takes whatever serves it (the engine or an upstream) and whatever
 * protocol it speaks: admission through the pause gate, and the call's one record.
 */
import { Effect } from "effect"
import type { Admission } from "../gate/PauseGate.js"
import { type ApiError, badRequest, heldTooLong, shuttingDown } from "../http/errors.js"
import { type CallContext, type CallEnv, recordError } from "./env.js"

/** What a refused admission records besides the error (the prompt built so far, when there is one). */
export type AdmitRecord = Parameters<typeof recordError>[4]

/**
 * Waits at the pause gate (a paused Gateway holds the call, it never refuses it). A call held
 * longer than the maximum is answered 503 and recorded; at shutdown it is answered 503 unrecorded
 * (the store may be closing).
 */
export const admit = (env: CallEnv, ctx: CallContext, request: unknown, extra: AdmitRecord = {}): Effect.Effect<Admission, ApiError> =>
  env.gate.enter.pipe(
    Effect.catchTags({
      HeldTooLong: (e) => {
        const error = heldTooLong(e.maxHoldSeconds, 5)
        return recordError(env, ctx, error, request, { ...extra, heldMs: e.maxHoldSeconds * 1000 }).pipe(Effect.zipRight(Effect.fail(error)))
      },
      GateClosed: () => Effect.fail(shuttingDown())
    })
  )

/**
 * Admission of a call an upstream serves: the body goes on as received, so the one thing checked
 * here is what every upstream needs, the model (recorded as the call's error when missing).
 */
export const admitForUpstream = (env: CallEnv, ctx: CallContext, body: Record<string, unknown>): Effect.Effect<{ readonly admission: Admission; readonly model: string }, ApiError> =>
  Effect.gen(function* () {
    const model = body.model
    if (typeof model !== "string") {
      const error = badRequest("'model' is required.", "model", "missing_required_parameter")
      yield* recordError(env, ctx, error, body)
      return yield* Effect.fail(error)
    }
    return { admission: yield* admit(env, ctx, body), model }
  })

/**
 * A call's one record: the first of success, failure or cancellation wins, and an interrupt (the
 * harness going away) can neither cut the record in half nor add a second one. `write` is what
 * recording means for the serving path; the latch calls it at most once.
 */
export const recordOnce = <Args extends ReadonlyArray<unknown>>(
  write: (...args: Args) => Effect.Effect<void, ApiError>
): ((...args: Args) => Effect.Effect<void, ApiError>) => {
  let claimed = false
  return (...args) =>
    Effect.uninterruptible(
      Effect.suspend(() => {
        if (claimed) return Effect.void
        claimed = true
        return write(...args)
      })
    )
}
