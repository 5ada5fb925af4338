/**
 * The Trainer's entities: its configuration (`TrainerConfig`, user-written, so snake_case keys
 * like the harness specs), why samples start and why data is dropped, and the metrics it records
 * for every policy version (`VersionMetrics`, streamed as events and written as JSONL).
 *
 * The config lives here rather than in @reins/trainer because it travels to the node that runs
 * the Trainer; @reins/trainer decodes user input into it with errors that name the key.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Schema } from "effect"
import { PauseMode } from "./GatewaySchema.js"
import { BreakReason } from "./StoreSchema.js"

// ---------------------------------------------------------------------------------------------
// Configuration

/**
 * `sync`: start `batch_groups × group_size` rollouts, wait for all, train, repeat.
 * `collocated`: keep `async_groups` groups running; update on the generation device while the
 * Gateway is paused. `split`: generate on one device, train on another, swap weights.
 */
export const ScheduleKind = Schema.Literal("sync", "collocated", "split")
export type ScheduleKind = typeof ScheduleKind.Type

/** `chain`: calls that extend each other's exact ids share a segment; `per-call`: one segment per call. */
export const SegmentMode = Schema.Literal("chain", "per-call")
export type SegmentMode = typeof SegmentMode.Type

/** `grpo`: baseline = group mean; `rloo`: baseline = mean of the other rollouts of the group. */
export const AdvantageEstimator = Schema.Literal("grpo", "rloo")
export type AdvantageEstimator = typeof AdvantageEstimator.Type

/**
 * How per-token loss weights are set (they always sum to 1 over a step's action tokens):
 * `rollout`: every rollout weighs the same, however many segments and tokens it produced;
 * `token`: every action token weighs the same (DAPO); `sequence`: every segment weighs the same.
 */
export const LossNormalization = Schema.Literal("rollout", "token", "sequence")
export type LossNormalization = typeof LossNormalization.Type

/** A rollout that finished without a final reward: `drop` it (counted) or score it `zero`. */
export const MissingRewardPolicy = Schema.Literal("drop", "zero")
export type MissingRewardPolicy = typeof MissingRewardPolicy.Type

const PositiveInt = Schema.Int.pipe(Schema.positive())
const NonNegativeInt = Schema.Int.pipe(Schema.nonNegative())
const PositiveNumber = Schema.Number.pipe(Schema.positive(), Schema.finite())
const Fraction = Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThan(1))

// Descriptions go on the property, not the value schema: there they would replace the
// "Expected a positive number" of a refinement in error messages.
const withDefault = <A, I>(schema: Schema.Schema<A, I>, value: NoInfer<A>, description: string) =>
  Schema.optionalWith(schema, { default: () => value }).annotations({ description })

const optional = <A, I>(schema: Schema.Schema<A, I>, description: string) => Schema.optional(schema).annotations({ description })

/** LoRA settings (PEFT's meaning): only adapters of rank `rank` on `target_modules` are trained. */
export class LoraSettings extends Schema.Class<LoraSettings>("LoraSettings")({
  rank: PositiveInt,
  alpha: PositiveNumber,
  dropout: Schema.optionalWith(Schema.Number.pipe(Schema.between(0, 0.99)), { default: () => 0 }),
  target_modules: Schema.optionalWith(
    Schema.NonEmptyArray(Schema.Literal("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    { default: () => ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const }
  )
}) {}

/**
 * Everything the Trainer is configured with. Every key is optional and has the default shown;
 * unknown keys are errors (see `decodeTrainerConfig` in @reins/trainer).
 */
export class TrainerConfig extends Schema.Class<TrainerConfig>("TrainerConfig")(
  {
    schedule: withDefault(ScheduleKind, "collocated", "sync | collocated | split"),
    batch_groups: withDefault(PositiveInt, 4, "task groups per update"),
    group_size: withDefault(PositiveInt, 8, "rollouts per task group (n)"),
    async_groups: optional(PositiveInt, "groups kept running in the async schedules; default 2 × batch_groups"),
    max_staleness: withDefault(NonNegativeInt, 2, "admission: no rollout starts whose tokens could be more than this many versions old when trained"),
    pause: withDefault(PauseMode, "interrupt", "how the Gateway frees the device for an update: interrupt | drain"),
    segment_mode: withDefault(SegmentMode, "chain", "chain | per-call"),
    max_seq_len: optional(PositiveInt, "tokens per training row; default: the policy's context"),
    advantage: withDefault(AdvantageEstimator, "grpo", "grpo | rloo"),
    std_scaling: withDefault(Schema.Boolean, false, "divide advantages by the group's reward std (off: Dr. GRPO)"),
    per_turn_rewards: withDefault(Schema.Boolean, false, "credit rewards posted with a call_id from that call on"),
    missing_reward: withDefault(MissingRewardPolicy, "drop", "rollouts without a final reward: drop | zero"),
    normalization: withDefault(LossNormalization, "rollout", "rollout | token | sequence"),
    pass_threshold: withDefault(Schema.Number.pipe(Schema.finite()), 1, "a rollout passes when its reward is at least this"),
    lr: withDefault(PositiveNumber, 1e-5, "learning rate"),
    weight_decay: withDefault(Schema.Number.pipe(Schema.nonNegative(), Schema.finite()), 0, "decoupled weight decay"),
    max_grad_norm: withDefault(PositiveNumber, 1, "gradient clipping by global norm"),
    clip_low: withDefault(Fraction, 0.2, "PPO clip: ratio ≥ 1 − clip_low"),
    clip_high: withDefault(PositiveNumber, 0.2, "PPO clip: ratio ≤ 1 + clip_high"),
    dual_clip: withDefault(
      Schema.Number.pipe(Schema.greaterThan(1), Schema.finite()),
      3,
      "PPO dual-clip c: the loss of a negative-advantage token is bounded by c·|A|"
    ),
    tis_cap: withDefault(
      Schema.Number.pipe(Schema.greaterThanOrEqualTo(1), Schema.finite()),
      2,
      "truncated importance sampling: weight = min(π_old / π_behavior, tis_cap)"
    ),
    micro_batch_tokens: optional(
      PositiveInt,
      "padded tokens (rows × longest row) per micro-batch; default: what the device's backend memory holds (wasm: at most 4096)"
    ),
    optimizer_steps: withDefault(PositiveInt, 1, "optimizer steps per batch (the batch is split by whole groups)"),
    dynamic_sampling: withDefault(
      Schema.Boolean,
      false,
      "drop a group whose rollouts all got the same reward as soon as it finishes and run another, so each update trains batch_groups groups with a signal (DAPO)"
    ),
    checkpoint_every: withDefault(NonNegativeInt, 10, "save a checkpoint every K versions (0: never)"),
    max_versions: optional(PositiveInt, "stop after this many updates; default: when the tasks run out"),
    max_infra_failures: withDefault(
      PositiveInt,
      5,
      "stop the run when this many rollouts in a row failed for an infrastructure reason (after their retries), none working in between"
    ),
    seed: withDefault(Schema.Int, 0, "seed of sampling and task order"),
    lora: optional(LoraSettings, "train LoRA adapters instead of every weight: { rank, alpha, dropout, target_modules }")
  },
  { identifier: "TrainerConfig" }
) {
  /** `async_groups`, or its default 2 × `batch_groups`. */
  get asyncGroups(): number {
    return this.async_groups ?? 2 * this.batch_groups
  }
}

// ---------------------------------------------------------------------------------------------
// Samples

/**
 * Why a segment starts: `first` (the rollout's first call), a Gateway `BreakReason` (the call's
 * prompt does not extend the segment's exact ids), `branched` (it extends an earlier call that is
 * not the end of any open segment, e.g. a retry of the same prompt), `per-call` (segment mode).
 */
export const SegmentStart = Schema.Literal("first", "branched", "per-call", ...BreakReason.literals)
export type SegmentStart = typeof SegmentStart.Type

/**
 * Every piece of recorded data that does not reach the loss, by reason. The unit of `count`:
 * - per call: `call-superseded` (a call of an earlier attempt of the rollout), `call-failed`
 *   (status ≠ 200), `call-untrainable` (exact ids or logprobs unknown), `call-malformed` (its
 *   per-token arrays disagree in length), `prompt-overlong` (no room for a response token in
 *   `max_seq_len`), `response-truncated` (response cut at `max_seq_len`; the rest is trained);
 * - per segment: `segment-empty` (no response tokens);
 * - per reward: `reward-unmatched` (a per-turn reward whose call is not in the attempt);
 * - per rollout: `reward-missing` (no final reward, with `missing_reward: drop`),
 *   `rollout-no-tokens` (it has a reward but nothing trainable; it still counts in its group's baseline);
 * - per group: `group-zero-variance` (every advantage is 0), `group-too-small` (< 2 rollouts with a reward).
 */
export const DropReason = Schema.Literal(
  "call-superseded",
  "call-failed",
  "call-untrainable",
  "call-malformed",
  "prompt-overlong",
  "response-truncated",
  "segment-empty",
  "reward-unmatched",
  "reward-missing",
  "rollout-no-tokens",
  "group-zero-variance",
  "group-too-small"
)
export type DropReason = typeof DropReason.Type

/** `actionTokens`: sampled tokens that do not reach the loss because of it. */
export class DropCount extends Schema.Class<DropCount>("DropCount")({
  count: Schema.Int,
  actionTokens: Schema.Int
}) {}

export const DropCounts = Schema.Record({ key: DropReason, value: DropCount })
export type DropCounts = typeof DropCounts.Type

export const SegmentStarts = Schema.Record({ key: SegmentStart, value: Schema.Int })
export type SegmentStarts = typeof SegmentStarts.Type

// ---------------------------------------------------------------------------------------------
// Metrics

/** Action tokens by staleness (current version − the version that sampled the token). */
export class StalenessStats extends Schema.Class<StalenessStats>("StalenessStats")({
  /** `histogram[s]`: action tokens of staleness `s`. */
  histogram: Schema.Array(Schema.Int),
  max: Schema.Int,
  /** null when there are no action tokens. */
  mean: Schema.NullOr(Schema.Number),
  /** Tokens stamped with a version newer than the trainer's (a bug upstream; never trained silently). */
  future: Schema.Int
}) {}

export class RewardStats extends Schema.Class<RewardStats>("RewardStats")({
  /** Rollouts with a final reward (scored `zero` ones included). */
  rollouts: Schema.Int,
  mean: Schema.NullOr(Schema.Number),
  /** Fraction with reward ≥ `pass_threshold`. */
  passRate: Schema.NullOr(Schema.Number)
}) {}

/** What reached the loss. */
export class UsedStats extends Schema.Class<UsedStats>("UsedStats")({
  groups: Schema.Int,
  rollouts: Schema.Int,
  segments: Schema.Int,
  /** All tokens of the training rows (prompts and observations included). */
  tokens: Schema.Int,
  actionTokens: Schema.Int
}) {}

export class PauseStats extends Schema.Class<PauseStats>("PauseStats")({
  /** The Gateway was paused for this long (update included). */
  pauseSeconds: Schema.Number,
  /** From the pause request until the device was free (in-flight generations finished or interrupted). */
  drainSeconds: Schema.Number,
  /** Calls that waited at the gate. */
  heldCalls: Schema.Int
}) {}

/** Fractions of the version's wall time; they sum to 1. */
export class DeviceBusy extends Schema.Class<DeviceBusy>("DeviceBusy")({
  generating: Schema.Number,
  training: Schema.Number,
  idle: Schema.Number
}) {}

/** One line of the metrics log: everything about the update that produced `version`. */
export class VersionMetrics extends Schema.Class<VersionMetrics>("VersionMetrics")({
  version: Schema.Int,
  /** When the version was published (ms since the epoch). */
  at: Schema.Number,
  /** Since the previous version (or the start of the run). */
  wallSeconds: Schema.Number,
  reward: RewardStats,
  used: UsedStats,
  segmentStarts: SegmentStarts,
  drops: DropCounts,
  staleness: StalenessStats,
  pause: PauseStats,
  device: DeviceBusy,
  /** What the update itself reported (loss, grad norm, clip and truncation fractions, ...); null when not finite. */
  train: Schema.Record({ key: Schema.String, value: Schema.NullOr(Schema.Number) })
}) {}

// ---------------------------------------------------------------------------------------------
// The Trainer actor

export class TrainerStatus extends Schema.Class<TrainerStatus>("TrainerStatus")({
  /** A run is in progress. */
  training: Schema.Boolean,
  schedule: Schema.NullOr(ScheduleKind),
  /** The policy version the Trainer is at (the one the next update trains). */
  version: Schema.Int,
  /** Updates made by the current (or last) run. */
  versions: Schema.Int,
  /** Groups handed out and still running / finished but not trained yet. */
  running: Schema.Int,
  finished: Schema.Int,
  /** Groups trained (or found untrainable) so far, and the admission budget in groups. */
  consumed: Schema.Int,
  budget: Schema.Int
}) {}

/** What a running Trainer answers, wherever it runs (`reins status`, scripts on other nodes). */
export class TrainerRpcs extends RpcGroup.make(
  Rpc.make("Status", { success: TrainerStatus }),
  /** Every version's metrics from now on. */
  Rpc.make("Versions", { success: VersionMetrics, stream: true })
) {}
