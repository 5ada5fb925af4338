/**
 * Rollouts that did not work, as the Trainer sees their groups end: what the progress line shows
 * for a batch (failed attempts and their most common reason), and the rule that stops a run
 * whose infrastructure fails everything. A cluster that rejects every Job (RBAC, quota, a
 * kubeconfig the client refuses) would otherwise make the run skip batch after batch for lack of
 * samples, forever, with the reason only in the store.
 *
 * The controller records a rollout that ended for an infrastructure reason (after its retries)
 * as `failed` with a reason starting `infra/<reason>:` (see the rollout package's outcome.ts).
 */
import type { RolloutEnded } from "@reins/protocol"

export interface FailureSummary {
  /**
   * Attempts that failed: every attempt of a rollout that ended failed, and the attempts before
   * the last of any other (a retry follows only an infrastructure failure).
   */
  readonly failedAttempts: number
  readonly failedRollouts: number
  /** The most common kind of reason of the failed rollouts (`infra/invalid-spec`, `timeout`, ...) and one example's detail; null when none failed. */
  readonly topReason: { readonly kind: string; readonly count: number; readonly example: string } | null
}

export const isInfraFailure = (ended: RolloutEnded): boolean => ended.state === "failed" && ended.reason.startsWith("infra/")

/** `infra/api: create Job x: HTTP 403 ...` → `infra/api`; a reason without `: ` is its own kind. */
const kindOf = (reason: string) => {
  const at = reason.indexOf(": ")
  return at < 0 ? reason : reason.slice(0, at)
}

/** The reason after its kind, without the controller's retry note, at most `max` characters. */
const example = (reason: string, max = 200) => {
  const kind = kindOf(reason)
  const plain = reason.slice(kind.length).replace(/^: /, "").replace(/ \((gave up after \d+ attempt\(s\)|retried as attempt \d+)\)$/, "")
  return plain.length <= max ? plain : `${plain.slice(0, max - 1)}…`
}

const topReason = (failed: ReadonlyArray<RolloutEnded>): FailureSummary["topReason"] => {
  const kinds = new Map<string, { count: number; example: string }>()
  for (const r of failed) {
    const kind = kindOf(r.reason)
    const seen = kinds.get(kind)
    if (seen === undefined) kinds.set(kind, { count: 1, example: example(r.reason) })
    else seen.count++
  }
  let best: FailureSummary["topReason"] = null
  for (const [kind, v] of kinds) if (best === null || v.count > best.count) best = { kind, ...v }
  return best
}

const kindAndExample = (top: NonNullable<FailureSummary["topReason"]>) =>
  `${top.kind} (${top.count}×)${top.example === "" ? "" : `: ${top.example}`}`

export const summarizeFailures = (ended: ReadonlyArray<RolloutEnded>): FailureSummary => {
  const failed = ended.filter((r) => r.state === "failed")
  const failedAttempts = ended.reduce((n, r) => n + (r.state === "failed" ? r.attempts : Math.max(0, r.attempts - 1)), 0)
  return { failedAttempts, failedRollouts: failed.length, topReason: topReason(failed) }
}

/** `failed: 6 attempts (3 rollouts), most often infra/api (3×): create Job …: HTTP 503 …` — empty when nothing failed. */
export const describeFailures = (s: FailureSummary): string => {
  if (s.failedAttempts === 0) return ""
  const rollouts = s.failedRollouts === 0 ? "retried" : `${s.failedRollouts} rollout${s.failedRollouts === 1 ? "" : "s"}`
  const top = s.topReason === null ? "" : `, most often ${kindAndExample(s.topReason)}`
  return `failed: ${s.failedAttempts} attempt${s.failedAttempts === 1 ? "" : "s"} (${rollouts})${top}`
}

/**
 * Rollouts in a row that failed for an infrastructure reason, counted by finished group: a group
 * with any rollout that reached its harness's end (succeeded, or failed on its own) shows the
 * infrastructure works and resets the count; cancelled rollouts neither count nor reset it.
 */
export class InfraStreak {
  private failed: Array<RolloutEnded> = []

  add(group: ReadonlyArray<RolloutEnded>): void {
    if (group.some((r) => r.state === "succeeded" || (r.state === "failed" && !isInfraFailure(r)))) this.failed = []
    else this.failed.push(...group.filter(isInfraFailure))
  }

  get count(): number {
    return this.failed.length
  }

  /** Why the run stops, once `count` reached `limit`. */
  message(limit: number): string {
    const top = topReason(this.failed)
    return `the last ${this.count} rollouts all failed for an infrastructure reason (max_infra_failures = ${limit}), ` +
      `most often ${top === null ? "(no reason recorded)" : kindAndExample(top)}. ` +
      "The run stops instead of waiting for rollouts that cannot run: fix the cause (the rollout nodes' logs say more), then start the run again or --resume it"
  }
}
