/**
 * Dynamic sampling (DAPO's): with `trainer.dynamic_sampling`, a group whose rollouts all got the
 * same reward is dropped as soon as it finishes and a new group takes its place, so every update
 * trains `batch_groups` groups that carry a learning signal. (Without it such groups are dropped
 * at batch time, `group-zero-variance`, and the update trains fewer groups.) The dropped groups
 * are counted in the next version's metrics under the same reason, and they free staleness budget
 * at once, like trained groups: none of their tokens is ever trained, so no bound is at stake.
 */
import { Effect } from "effect"
import { DropTally } from "../drops.js"
import { type RolloutEnded, TrainerError } from "./ports.js"

/** Every rollout succeeded with a reward, and all rewards are equal: GRPO's advantages would all be 0. */
export const hasNoSignal = (ended: ReadonlyArray<RolloutEnded>): boolean =>
  ended.length >= 2 &&
  ended.every((e) => e.state === "succeeded" && e.reward !== null && e.reward === ended[0]!.reward)

export class GroupFilter {
  /** Dropped since the last version's metrics. */
  private dropped = new DropTally()
  /** Dropped one after another, with no group that had a signal in between. */
  private inRow = 0

  /** Gives up after `limit` groups in a row without a signal: the tasks teach this policy nothing. */
  constructor(private readonly limit: number) {}

  /** Whether to drop a finished group; fails once `limit` were dropped in a row. */
  drop(ended: ReadonlyArray<RolloutEnded>): Effect.Effect<boolean, TrainerError> {
    if (!hasNoSignal(ended)) {
      this.inRow = 0
      return Effect.succeed(false)
    }
    this.dropped.add("group-zero-variance")
    this.inRow++
    if (this.inRow < this.limit) return Effect.succeed(true)
    return Effect.fail(new TrainerError({
      operation: "dynamic sampling",
      message: `the last ${this.inRow} groups each got one reward for all their rollouts (reward ${ended[0]!.reward}): ` +
        "no group carries a learning signal, so no update can be made. Check the verifier, or start from a policy that sometimes succeeds and sometimes fails on these tasks"
    }))
  }

  /** The drops to add to the next version's metrics (and forget). */
  take(): DropTally {
    const out = this.dropped
    this.dropped = new DropTally()
    return out
  }
}
