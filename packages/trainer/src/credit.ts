/**
 * Returns: what a rollout earned, from each of its turns on.
 *
 * Without per-turn rewards a rollout has one return, its final reward R, credited to every token.
 *
 * With per-turn rewards (rewards posted with a `callId`), the return of turn k is
 *
 *     G(k) = R + Σ ρ   over the per-turn rewards ρ whose call has seq ≥ the seq of turn k
 *
 * i.e. the final reward plus every per-turn reward earned at or after that call (undiscounted:
 * harness turns are few and their rewards are meant to add up). A reward posted on a failed call
 * still counts for the turns before it; one whose call is not in the attempt is counted as
 * `reward-unmatched` and ignored. Past its last turn a rollout's return is R (nothing more to earn),
 * which lets baselines compare turn k of every rollout of a group (see advantages.ts).
 */
import type { DropTally } from "./drops.js"
import { bySeq, type RolloutTrace } from "./samples/trace.js"

export interface RolloutReturns {
  /** The final reward R. */
  readonly final: number
  /** `byTurn[k]` = G(k) per turn position; empty when per-turn rewards are off. */
  readonly byTurn: Float64Array
}

/** G(k), or R past the rollout's last turn. */
export const returnAt = (r: RolloutReturns, k: number): number => (k < r.byTurn.length ? r.byTurn[k] : r.final)

export const finalOnly = (final: number): RolloutReturns => ({ final, byTurn: new Float64Array(0) })

/** Per-turn returns of a rollout whose final reward is `final`. */
export const perTurnReturns = (trace: RolloutTrace, final: number, drops: DropTally): RolloutReturns => {
  const calls = bySeq(trace.calls)
  const seqOf = new Map(calls.map((c) => [c.id, c.seq]))
  const turnSeqs = calls.filter((c) => c.status === 200).map((c) => c.seq)
  const byTurn = new Float64Array(turnSeqs.length).fill(final)
  for (const reward of trace.rewards) {
    if (reward.callId === null) continue
    const seq = seqOf.get(reward.callId)
    if (seq === undefined) {
      drops.add("reward-unmatched")
      continue
    }
    for (let k = 0; k < turnSeqs.length && turnSeqs[k]! <= seq; k++) byTurn[k] += reward.value
  }
  return { final, byTurn }
}
