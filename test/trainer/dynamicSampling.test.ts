/** Dynamic sampling's decision (which finished groups carry no signal) and its give-up error. */
import { describe, expect, it } from "@effect/vitest"
import { RolloutEnded } from "@reins/protocol"
import { GroupFilter, hasNoSignal } from "@reins/trainer"
import { Effect, Exit } from "effect"

const ended = (rewards: ReadonlyArray<number | null>, state: "succeeded" | "failed" = "succeeded") =>
  rewards.map((reward, i) => new RolloutEnded({ rolloutId: `r${i}`, groupId: "g", taskId: "t", state, reason: "", attempts: 1, reward }))

describe("dynamic sampling", () => {
  it("a group has no signal only when every rollout succeeded with the same reward", () => {
    expect(hasNoSignal(ended([1, 1, 1]))).toBe(true)
    expect(hasNoSignal(ended([0, 0]))).toBe(true)
    expect(hasNoSignal(ended([1, 0, 1]))).toBe(false)
    expect(hasNoSignal(ended([1, null, 1]))).toBe(false) // a missing reward: left to the batch's own handling
    expect(hasNoSignal(ended([1, 1], "failed"))).toBe(false)
    expect(hasNoSignal(ended([1]))).toBe(false) // one rollout: nothing to compare
  })

  it.effect("counts what it drops for the next metrics line, and gives up after `limit` in a row, saying why", () =>
    Effect.gen(function*() {
      const filter = new GroupFilter(3)
      expect(yield* filter.drop(ended([1, 1]))).toBe(true)
      expect(yield* filter.drop(ended([0, 1]))).toBe(false) // a signal resets the streak
      expect(yield* filter.drop(ended([1, 1]))).toBe(true)
      expect(yield* filter.drop(ended([1, 1]))).toBe(true)
      expect(filter.take().count("group-zero-variance")).toBe(3)
      expect(filter.take().count("group-zero-variance")).toBe(0)
      const exit = yield* Effect.exit(filter.drop(ended([0, 0])))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(String(exit)).toContain("the last 3 groups each got one reward for all their rollouts (reward 0)")
    }))
})
