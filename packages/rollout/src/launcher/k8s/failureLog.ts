/**
 * Warnings about Kubernetes API failures, rate-limited per kind. A cluster that rejects every
 * create (RBAC, quota, a kubeconfig the client refuses) must be visible in the node's log with
 * the API's status and message — not only in the store, attempt by attempt — but a thousand
 * failing creates must not flood it. The first failure of a kind is logged at once; later ones
 * at most once per interval, saying how many were folded into that line.
 */
import { Clock, Duration, Effect } from "effect"

export type FailureLog = ReturnType<typeof makeFailureLog>

export const makeFailureLog = (every: Duration.DurationInput = "10 seconds") => {
  const intervalMs = Duration.toMillis(Duration.decode(every))
  const kinds = new Map<string, { lastAt: number; folded: number }>()
  return {
    /** `kind` groups failures for the rate limit (e.g. `create 403`); `message` is what is logged. */
    warn: (kind: string, message: string): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const seen = kinds.get(kind)
        if (seen !== undefined && now - seen.lastAt < intervalMs) {
          seen.folded++
          return Effect.void
        }
        const folded = seen?.folded ?? 0
        kinds.set(kind, { lastAt: now, folded: 0 })
        const more = folded > 0 ? ` (and ${folded} more like it in the last ${Math.round((now - seen!.lastAt) / 1000)} s)` : ""
        return Effect.logWarning(`Kubernetes launcher: ${message}${more}`)
      })
  }
}
