/**
 * How the controller settles an attempt that ended: the state and reason it records, and whether
 * the rollout goes on with a new attempt — a small pure decision beside `outcome.ts`.
 */
import type { AttemptOutcome } from "@reins/protocol"
import { attemptStateOf, type EndedState, isRetryable, outcomeReason } from "./outcome.js"

export interface SettleInput {
  readonly outcome: AttemptOutcome
  /** 0 for the first attempt of the rollout, n for its n-th retry. */
  readonly attemptIndex: number
  /** Attempts per rollout in all: the first plus retries. */
  readonly maxAttempts: number
  /** Set when the rollout was cancelled (by its caller): nothing is retried then. */
  readonly cancelReason: string | null
}

export interface SettleDecision {
  readonly state: EndedState
  readonly reason: string
  /** A new attempt retries the rollout (else the rollout ends with this one). */
  readonly retry: boolean
}

export const settleDecision = ({ attemptIndex, cancelReason, maxAttempts, outcome }: SettleInput): SettleDecision => {
  const cancelled = cancelReason !== null
  const retryable = isRetryable(outcome)
  const retry = retryable && !cancelled && attemptIndex + 1 < maxAttempts
  // an infrastructure failure of a cancelled rollout (its launcher broke while stopping it) is its cancel
  const cancelledInfra = cancelled && outcome._tag === "InfraFailed"
  const base = cancelledInfra ? `cancelled: ${cancelReason} (${outcomeReason(outcome)})` : outcomeReason(outcome)
  return {
    state: cancelledInfra ? "cancelled" : attemptStateOf(outcome),
    reason: retry
      ? `${base} (retried as attempt ${attemptIndex + 2})`
      : retryable && !cancelled
      ? `${base} (gave up after ${attemptIndex + 1} attempt(s))`
      : base,
    retry
  }
}

/** The delay before retry n (n ≥ 1): `initialMs * 2^(n-1)`, at most `maxMs`. */
export const retryDelayMs = (retry: number, initialMs: number, maxMs: number): number =>
  Math.min(maxMs, initialMs * 2 ** Math.max(0, retry - 1))
