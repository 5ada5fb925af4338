import { describe, expect, it } from "@effect/vitest"
import { batchOptions, configKeys, decodeTrainerConfig, lossSettings, TrainerConfig, TrainerConfigError, trainerConfig, trainSettings } from "@reins/trainer"
import { Effect } from "effect"

const issuesOf = (input: unknown) =>
  Effect.flip(decodeTrainerConfig(input)).pipe(
    Effect.tap((e) => expect(e).toBeInstanceOf(TrainerConfigError)),
    Effect.map((e) => ({ message: e.message, issues: Object.fromEntries(e.issues.map((i) => [i.key, i.message])) }))
  )

describe("TrainerConfig", () => {
  it.effect("has documented defaults for every key", () =>
    Effect.gen(function*() {
      const config = yield* decodeTrainerConfig({})
      expect(config).toBeInstanceOf(TrainerConfig)
      expect(config).toMatchObject({
        schedule: "collocated",
        batch_groups: 4,
        group_size: 8,
        max_staleness: 2,
        pause: "interrupt",
        segment_mode: "chain",
        advantage: "grpo",
        std_scaling: false,
        per_turn_rewards: false,
        missing_reward: "drop",
        normalization: "rollout",
        clip_low: 0.2,
        clip_high: 0.2,
        dual_clip: 3,
        tis_cap: 2,
        optimizer_steps: 1,
        checkpoint_every: 10,
        seed: 0
      })
      expect(config.async_groups).toBeUndefined()
      // unset: the device sizes micro-batches from its memory
      expect(config.micro_batch_tokens).toBeUndefined()
      expect(trainSettings(config, 512).microBatchTokens).toBeUndefined()
      expect(trainSettings(trainerConfig({ micro_batch_tokens: 2048 }), 512).microBatchTokens).toBe(2048)
      expect(config.asyncGroups).toBe(8)
      expect(trainerConfig({ batch_groups: 3, async_groups: 5 }).asyncGroups).toBe(5)
      expect(lossSettings(config)).toEqual({ clipLow: 0.2, clipHigh: 0.2, dualClip: 3, tisCap: 2 })
      expect(batchOptions(config, 512)).toMatchObject({ mode: "chain", maxTokens: 512, estimator: "grpo", perTurn: false })
      expect(batchOptions(trainerConfig({ max_seq_len: 256 }), 512).maxTokens).toBe(256)
    }))

  it.effect("names an unknown key, with the key it probably meant", () =>
    Effect.gen(function*() {
      const typo = yield* issuesOf({ batch_group: 8 })
      expect(typo.issues).toEqual({ batch_group: 'unknown key (did you mean "batch_groups"?)' })
      expect(typo.message).toBe('invalid trainer config: batch_group: unknown key (did you mean "batch_groups"?)')
      const unrelated = yield* issuesOf({ learning_rate_schedule_kind: "cosine" })
      expect(unrelated.issues["learning_rate_schedule_kind"]).toMatch(/^unknown key; known keys: schedule, batch_groups, /)
      expect(configKeys).toContain("micro_batch_tokens")
    }))

  it.effect("reports every bad value at once, each with its key", () =>
    Effect.gen(function*() {
      const { issues } = yield* issuesOf({
        schedule: "fast",
        group_size: 1.5,
        lr: -1,
        clip_low: 1.2,
        dual_clip: 1,
        tis_cap: 0.5,
        std_scaling: "yes",
        normalization: "tokens"
      })
      expect(issues).toEqual({
        schedule: 'Expected "sync" | "collocated" | "split", actual "fast"',
        group_size: "Expected an integer, actual 1.5",
        lr: "Expected a positive number, actual -1",
        clip_low: "Expected a number less than 1, actual 1.2",
        dual_clip: "Expected a number greater than 1, actual 1",
        tis_cap: "Expected a number greater than or equal to 1, actual 0.5",
        std_scaling: 'Expected boolean, actual "yes"',
        normalization: 'Expected "rollout" | "token" | "sequence", actual "tokens"'
      })
    }))

  it.effect("checks rules that span keys", () =>
    Effect.gen(function*() {
      const { issues } = yield* issuesOf({ batch_groups: 4, async_groups: 2, max_seq_len: 8192, micro_batch_tokens: 4096 })
      expect(issues["async_groups"]).toMatch(/cannot fill a batch of batch_groups = 4/)
      expect(issues["max_seq_len"]).toMatch(/does not fit a micro-batch of micro_batch_tokens = 4096/)
    }))

  it.effect("rejects input that is not an object of settings", () =>
    Effect.gen(function*() {
      expect((yield* issuesOf(null)).message).toBe("invalid trainer config: expected an object of settings, got null")
      expect((yield* issuesOf([])).message).toMatch(/got an array/)
      expect((yield* issuesOf("schedule=sync")).message).toMatch(/got string/)
    }))

  it("throws the same tagged error when built in code", () => {
    expect(() => trainerConfig({ batch_groups: 0 })).toThrow(/batch_groups: Expected a positive number, actual 0/)
  })
})
