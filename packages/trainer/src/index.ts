/**
 * @reins/trainer: finished rollouts → training samples (segments, rollout-level advantages,
 * loss weights, optimizer steps), the Trainer's config and its per-version metrics. See README.md
 * in this folder for the definitions.
 */

/** `TrainerConfig` decoding: unknown keys and bad values are `TrainerConfigError`s naming the key. */
export * from "./config.js"
/** Rollout records → traces (the attempt that counts, its calls and rewards). */
export * from "./samples/trace.js"
/** Calls → segments (chain / per-call), with overlong handling. */
export * from "./samples/segments.js"
/** One rollout → its segments, every unusable call counted. */
export * from "./samples/adapter.js"
export * from "./samples/trained.js"
/** Per-turn returns. */
export * from "./credit.js"
/** Rollout-level advantages (GRPO, RLOO, std scaling, per-turn). */
export * from "./advantages.js"
/** Per-token loss weights (rollout, token, sequence). */
export * from "./normalization.js"
/** Staleness and truncated importance sampling. */
export * from "./offpolicy.js"
/** A batch → optimizer steps (by whole groups, each normalized). */
export * from "./batching.js"
/** A batch of rollouts → scored samples + stats. */
export * from "./batch.js"
/** Drop counters by reason. */
export * from "./drops.js"
/** Per-version metrics and the device clock. */
export * from "./metrics.js"
/** Append-only JSONL of Schema rows, torn-line safe. */
export * from "./jsonl.js"
/** SFT data: demos → sequences, demo tokenizer, compact chat template, step plan. */
export * from "./sft/index.js"
/** The schedules (sync, collocated, split): the run loop, its ports, the staleness gate, checkpoints. */
export * from "./schedule/index.js"
