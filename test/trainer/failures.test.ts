/**
 * What the Trainer makes of rollouts that did not work (schedule/failures.ts): the per-batch
 * summary of the progress line, and the streak that stops a run whose infrastructure fails every
 * rollout. Reasons are the controller's (`infra/<reason>: …`, retry notes included).
 */
import { describe, expect, it } from "@effect/vitest"
import { RolloutEnded } from "@reins/protocol"
import { describeFailures, InfraStreak, summarizeFailures } from "@reins/trainer"

let n = 0
const ended = (state: RolloutEnded["state"], reason: string, attempts = 1) =>
  new RolloutEnded({ rolloutId: `r${++n}`, groupId: "g", taskId: "t", state, reason, attempts, reward: state === "succeeded" ? 1 : null })

const forbidden = (job: string) => `infra/invalid-spec: create Job ${job}: HTTP 403 Forbidden: jobs.batch is forbidden`

describe("failure summary", () => {
  it("counts failed attempts (retried ones included) and names the most common kind of reason with one example", () => {
    const s = summarizeFailures([
      ended("succeeded", "exit code 0", 2), // one infrastructure failure before it worked
      ended("failed", `infra/api: create Job a: HTTP 503 ServiceUnavailable: busy (gave up after 3 attempt(s))`, 3),
      ended("failed", forbidden("b")),
      ended("failed", forbidden("c")),
      ended("failed", "exit code 3 (BackoffLimitExceeded: Job has reached the specified backoff limit)"),
      ended("cancelled", "cancelled: the training run ended", 1)
    ])
    expect(s).toEqual({ failedAttempts: 1 + 3 + 1 + 1 + 1, failedRollouts: 4, topReason: { kind: "infra/invalid-spec", count: 2, example: "create Job b: HTTP 403 Forbidden: jobs.batch is forbidden" } })
    expect(describeFailures(s)).toBe("failed: 7 attempts (4 rollouts), most often infra/invalid-spec (2×): create Job b: HTTP 403 Forbidden: jobs.batch is forbidden")
    // the retry note is not part of the example
    expect(summarizeFailures([ended("failed", "infra/api: x (gave up after 3 attempt(s))", 3)]).topReason?.example).toBe("x")
    expect(describeFailures(summarizeFailures([ended("succeeded", "exit code 0")]))).toBe("")
    expect(describeFailures(summarizeFailures([ended("succeeded", "exit code 0", 3)]))).toBe("failed: 2 attempts (retried)")
  })
})

describe("infrastructure streak", () => {
  it("counts rollouts that failed for an infrastructure reason, by group; a group in which any rollout worked resets it", () => {
    const streak = new InfraStreak()
    streak.add([ended("failed", forbidden("a")), ended("failed", forbidden("b"))])
    expect(streak.count).toBe(2)
    // a harness that failed by itself reached its end: the infrastructure works
    streak.add([ended("failed", forbidden("c")), ended("failed", "timeout: Job deadline exceeded")])
    expect(streak.count).toBe(0)
    streak.add([ended("failed", forbidden("d")), ended("cancelled", "cancelled: the training run ended")])
    streak.add([ended("failed", "infra/api: create Job e: HTTP 500 InternalError: boom"), ended("failed", forbidden("f"))])
    expect(streak.count).toBe(3)
    expect(streak.message(3)).toMatch(/^the last 3 rollouts all failed for an infrastructure reason \(max_infra_failures = 3\), most often infra\/invalid-spec \(2×\): create Job d: HTTP 403 Forbidden/)
    streak.add([ended("succeeded", "exit code 0", 2)])
    expect(streak.count).toBe(0)
  })
})
