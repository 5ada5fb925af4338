/**
 * What the controller does with an attempt's result, as small pure decisions: the state and
 * reason to record, whether to retry, and which reward (if any) the attempt earned.
 */
import type { AttemptOutcome, AttemptResult, AttemptState } from "@reins/protocol"

/** The states an attempt ends in. */
export type EndedState = Exclude<AttemptState, "queued" | "running">

const stateOfTag: Record<AttemptOutcome["_tag"], EndedState> = { Succeeded: "succeeded", Failed: "failed", InfraFailed: "failed", Cancelled: "cancelled" }

/** The Gateway store's attempt state for an outcome (an infrastructure failure is a failed attempt; the rollout goes on with a new one). */
export const attemptStateOf = (outcome: AttemptOutcome): EndedState => stateOfTag[outcome._tag]

/** One line for the store's `reason` column: `exit code 3`, `timeout: ...`, `infra/oom-killed: ...`. */
export const outcomeReason = (outcome: AttemptOutcome): string => {
  switch (outcome._tag) {
    case "Succeeded":
      return `exit code ${outcome.exitCode}`
    case "Failed":
      return outcome.reason === "exit" ? outcome.message : `${outcome.reason}: ${outcome.message}`
    case "InfraFailed":
      return `infra/${outcome.reason}: ${outcome.message}`
    case "Cancelled":
      return `cancelled: ${outcome.reason}`
  }
}

/** Infrastructure broke and the same attempt spec may well work elsewhere or later. */
export const isRetryable = (outcome: AttemptOutcome): boolean => outcome._tag === "InfraFailed" && outcome.retryable

/**
 * How a failed (behaviour) attempt is rewarded: `zero`, `drop` (excluded from training), or
 * `verifier` (whatever the verifier says, as for successes).
 */
export type FailedRewardPolicy = "zero" | "drop" | "verifier"

export type RewardDecision =
  | { readonly _tag: "Reward"; readonly value: number; readonly source: "verifier" | "policy" }
  /** No verifier reward: the harness may have posted one to /v1/reward, else the rollout has none. */
  | { readonly _tag: "NoVerifierReward"; readonly reason: string }
  | { readonly _tag: "Drop"; readonly reason: string }

export const rewardDecision = (result: AttemptResult, onFailed: FailedRewardPolicy): RewardDecision => {
  const o = result.outcome
  if (o._tag === "InfraFailed" || o._tag === "Cancelled") return { _tag: "NoVerifierReward", reason: outcomeReason(o) }
  if (o._tag === "Failed" && onFailed === "zero") return { _tag: "Reward", value: 0, source: "policy" }
  if (o._tag === "Failed" && onFailed === "drop") return { _tag: "Drop", reason: outcomeReason(o) }
  const v = result.verifier
  if (v === null) return { _tag: "NoVerifierReward", reason: "no verifier configured" }
  if (v._tag === "VerifierError") return { _tag: "NoVerifierReward", reason: `verifier ${v.reason}: ${v.message}` }
  return { _tag: "Reward", value: v.value, source: "verifier" }
}
