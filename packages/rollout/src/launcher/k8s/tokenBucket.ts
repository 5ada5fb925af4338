/**
 * A token bucket: at most `burst` operations at once, refilled at `perSecond`. Callers that find
 * it empty reserve the next token (the count goes negative) and sleep until it is theirs, so
 * waiting callers are served in arrival order and the long-run rate never exceeds `perSecond`.
 * Used to keep Job creation from flooding the API server (and its priority-and-fairness limits).
 */
import { Clock, Duration, Effect, Ref } from "effect"

export interface RateLimit {
  readonly perSecond: number
  readonly burst: number
}

export interface TokenBucket {
  /** Waits until a token is available and takes it. */
  readonly take: Effect.Effect<void>
}

export const makeTokenBucket = (limit: RateLimit): Effect.Effect<TokenBucket> =>
  Effect.gen(function*() {
    if (!(limit.perSecond > 0) || !Number.isFinite(limit.perSecond)) return { take: Effect.void }
    const burst = Math.max(1, limit.burst)
    const state = yield* Ref.make({ tokens: burst, at: yield* Clock.currentTimeMillis })
    const take = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Ref.modify(state, (s) => {
        const tokens = Math.min(burst, s.tokens + ((now - s.at) * limit.perSecond) / 1000) - 1
        const waitMs = tokens >= 0 ? 0 : (-tokens * 1000) / limit.perSecond
        return [waitMs, { tokens, at: now }] as const
      })
    ).pipe(Effect.flatMap((waitMs) => (waitMs > 0 ? Effect.sleep(Duration.millis(waitMs)) : Effect.void)))
    return { take }
  })
