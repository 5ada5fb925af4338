/**
 * Advantages at the rollout level. A rollout is one sample of "how well did the policy do on
 * this task", however many segments its calls were cut into, so the baseline is taken over the
 * rollouts of its task group and every segment of a rollout shares the rollout's advantage.
 *
 * For the returns v_1..v_n of a group's n rollouts (their final rewards, or G(k) at one turn
 * position k with per-turn rewards, see credit.ts):
 *
 *   grpo:  A_i = v_i − mean(v)
 *   rloo:  A_i = v_i − mean(v_j, j ≠ i)          ( = n/(n−1) · (v_i − mean(v)) )
 *   std_scaling: A_i /= std(v) + 1e-6, with the sample std (n − 1); off is Dr. GRPO, which
 *   avoids up-weighting groups that are nearly all right or all wrong.
 *
 * With per-turn rewards the baseline is per group and turn position: the tokens of turn k of
 * rollout i get A_i(k), computed from G_j(k) of every rollout j of the group (a rollout that has
 * already ended contributes its final reward). Without per-turn rewards G(k) = R for every k, so
 * this is exactly the rollout-level advantage above.
 *
 * Groups where every advantage is 0 (all returns equal) carry no signal: skipped and counted.
 * So are groups with fewer than 2 rollouts with a reward (no baseline to compare against).
 */
import type { AdvantageEstimator, MissingRewardPolicy } from "@reins/protocol"
import { finalOnly, perTurnReturns, returnAt, type RolloutReturns } from "./credit.js"
import { DropTally } from "./drops.js"
import type { Segment } from "./samples/segments.js"
import type { RolloutTrace } from "./samples/trace.js"

export interface AdvantageOptions {
  readonly estimator: AdvantageEstimator
  readonly stdScaling: boolean
  readonly perTurn: boolean
  readonly missingReward: MissingRewardPolicy
}

/** A segment with its per-token advantages (0 on non-action tokens). */
export interface ScoredSegment extends Segment {
  readonly advantages: Float32Array
}

/** A finished rollout and the segments the adapter made of it. */
export interface AdaptedTrace {
  readonly trace: RolloutTrace
  readonly segments: ReadonlyArray<Segment>
}

export interface ScoredBatch {
  readonly samples: ReadonlyArray<ScoredSegment>
  /** Final rewards of every rollout that had one (or was scored zero), trained on or not. */
  readonly rewards: ReadonlyArray<number>
  /** Rollouts without a final reward that were scored 0 (`missing_reward: zero`). */
  readonly zeroed: number
  /** Groups that produced samples. */
  readonly groups: number
  readonly drops: DropTally
}

const STD_EPSILON = 1e-6

const hasSpread = (v: Float64Array): boolean => {
  let min = Infinity
  let max = -Infinity
  for (const x of v) {
    if (x < min) min = x
    if (x > max) max = x
  }
  return max - min > 1e-9 * Math.max(1, Math.abs(max), Math.abs(min))
}

/** Advantages of one set of returns (one group, one turn position); all 0 when they are equal. */
export const baselineAdvantages = (v: Float64Array, estimator: AdvantageEstimator, stdScaling: boolean): Float64Array => {
  const n = v.length
  const out = new Float64Array(n)
  if (n < 2 || !hasSpread(v)) return out
  const sum = v.reduce((a, x) => a + x, 0)
  const mean = sum / n
  const squares = v.reduce((a, x) => a + (x - mean) * (x - mean), 0)
  const scale = stdScaling ? 1 / (Math.sqrt(squares / (n - 1)) + STD_EPSILON) : 1
  for (let i = 0; i < n; i++) {
    const baseline = estimator === "rloo" ? (sum - v[i]!) / (n - 1) : mean
    out[i] = (v[i]! - baseline) * scale
  }
  return out
}

/**
 * Per rollout of a group: `A[i][k]` for each turn position k it has (one position without
 * per-turn rewards). Null when every advantage is 0.
 */
export const groupAdvantages = (
  returns: ReadonlyArray<RolloutReturns>,
  estimator: AdvantageEstimator,
  stdScaling: boolean
): ReadonlyArray<Float64Array> | null => {
  const positions = Math.max(1, ...returns.map((r) => r.byTurn.length))
  const out = returns.map((r) => new Float64Array(Math.max(1, r.byTurn.length)))
  let signal = false
  const column = new Float64Array(returns.length)
  for (let k = 0; k < positions; k++) {
    returns.forEach((r, i) => (column[i] = returnAt(r, k)))
    const a = baselineAdvantages(column, estimator, stdScaling)
    out.forEach((row, i) => {
      if (k < row.length) {
        row[k] = a[i]!
        if (a[i] !== 0) signal = true
      }
    })
  }
  return signal ? out : null
}

/** Spreads a rollout's advantages over the action tokens of one of its segments. */
export const scoreSegment = (segment: Segment, advantages: Float64Array): ScoredSegment => {
  const perToken = new Float32Array(segment.tokens.length)
  for (const span of segment.spans) perToken.fill(advantages[Math.min(span.turn, advantages.length - 1)]!, span.start, span.end)
  return { ...segment, advantages: perToken }
}

const actionTokensOf = (segments: ReadonlyArray<Segment>) => segments.reduce((n, s) => n + s.actionTokens, 0)

/** Groups in the order their first rollout appears, so results do not depend on Map iteration quirks. */
const byGroup = (rollouts: ReadonlyArray<AdaptedTrace>): Map<string, Array<AdaptedTrace>> => {
  const groups = new Map<string, Array<AdaptedTrace>>()
  for (const r of rollouts) {
    const members = groups.get(r.trace.groupId)
    if (members === undefined) groups.set(r.trace.groupId, [r])
    else members.push(r)
  }
  return groups
}

/** Rollout-level advantages for a batch of finished rollouts (any number of groups). */
export const scoreRollouts = (rollouts: ReadonlyArray<AdaptedTrace>, options: AdvantageOptions): ScoredBatch => {
  const drops = new DropTally()
  const samples: Array<ScoredSegment> = []
  const rewards: Array<number> = []
  let zeroed = 0
  let groups = 0
  for (const members of byGroup(rollouts).values()) {
    const rewarded: Array<{ member: AdaptedTrace; returns: RolloutReturns }> = []
    for (const member of members) {
      let final = member.trace.reward
      if (final === null) {
        if (options.missingReward === "drop") {
          drops.add("reward-missing", 1, actionTokensOf(member.segments))
          continue
        }
        final = 0
        zeroed++
      }
      rewards.push(final)
      rewarded.push({ member, returns: options.perTurn ? perTurnReturns(member.trace, final, drops) : finalOnly(final) })
    }
    const tokens = rewarded.reduce((n, r) => n + actionTokensOf(r.member.segments), 0)
    if (rewarded.length < 2) {
      if (rewarded.length > 0) drops.add("group-too-small", 1, tokens)
      continue
    }
    const advantages = groupAdvantages(rewarded.map((r) => r.returns), options.estimator, options.stdScaling)
    if (advantages === null) {
      drops.add("group-zero-variance", 1, tokens)
      continue
    }
    rewarded.forEach(({ member }, i) => {
      if (member.segments.length === 0) drops.add("rollout-no-tokens")
      for (const segment of member.segments) samples.push(scoreSegment(segment, advantages[i]!))
    })
    if (rewarded.some(({ member }) => member.segments.length > 0)) groups++
  }
  return { samples, rewards, zeroed, groups, drops }
}
