/**
 * What the Gateway records, as the store hands it out: rollouts, their attempts, every model
 * call (`LlmCall`, with the exact token ids, logprobs and policy versions), rewards, model
 * versions and the event log. Token arrays are packed typed arrays (see `Packed`).
 *
 * Times are milliseconds since the Unix epoch.
 */
import { Packed } from "@reins/runtime"
import { Schema } from "effect"

/** The life of one attempt. `queued → running → succeeded | failed | cancelled`. */
export const AttemptState = Schema.Literal("queued", "running", "succeeded", "failed", "cancelled")
export type AttemptState = typeof AttemptState.Type

/** The legal moves of the attempt state machine (a queued attempt may fail or be cancelled before it starts). */
export const AttemptTransitions: { readonly [S in AttemptState]: ReadonlyArray<AttemptState> } = {
  queued: ["running", "failed", "cancelled"],
  running: ["succeeded", "failed", "cancelled"],
  succeeded: [],
  failed: [],
  cancelled: []
}

/** Why a call's prompt could not reuse the exact token ids of this attempt's earlier calls. */
export const BreakReason = Schema.Literal("history-edited", "template", "retokenized", "truncated")
export type BreakReason = typeof BreakReason.Type

export class Rollout extends Schema.Class<Rollout>("Rollout")({
  id: Schema.String,
  /** The task input, as given when the rollout was created. */
  task: Schema.Unknown,
  group: Schema.NullOr(Schema.String),
  /** The state of the rollout's latest attempt. */
  state: AttemptState,
  attempts: Schema.Int,
  /** The last final reward (a reward without `callId`), if any. */
  reward: Schema.NullOr(Schema.Number),
  createdAt: Schema.Number,
  updatedAt: Schema.Number
}) {}

export class Attempt extends Schema.Class<Attempt>("Attempt")({
  id: Schema.String,
  rolloutId: Schema.String,
  /** 0 for the first attempt of a rollout, 1 for its first retry, ... */
  index: Schema.Int,
  state: AttemptState,
  /** Why it ended (exit code, timeout, infrastructure failure, ...). */
  reason: Schema.NullOr(Schema.String),
  createdAt: Schema.Number,
  startedAt: Schema.NullOr(Schema.Number),
  finishedAt: Schema.NullOr(Schema.Number)
}) {}

/** How the prompt ids of a call were obtained. */
export class PromptReuse extends Schema.Class<PromptReuse>("PromptReuse")({
  /** Leading prompt tokens copied exactly from an earlier call of the attempt (its prompt + output). */
  reusedTokens: Schema.Int,
  fromCallId: Schema.NullOr(Schema.String),
  /** Set when an earlier call exists but its tokens could not be reused. */
  break: Schema.NullOr(BreakReason)
}) {}

export class CallTimings extends Schema.Class<CallTimings>("CallTimings")({
  receivedAt: Schema.Number,
  /** When generation began (after the pause gate). */
  startedAt: Schema.NullOr(Schema.Number),
  firstTokenAt: Schema.NullOr(Schema.Number),
  finishedAt: Schema.Number,
  /** Time spent held by a paused gateway. */
  heldMs: Schema.Number
}) {}

/** The route a call came by: OpenAI chat and text completions, OpenAI Responses, Anthropic Messages. */
export const CallEndpoint = Schema.Literal("chat.completions", "completions", "responses", "messages")
export type CallEndpoint = typeof CallEndpoint.Type

/** The wire protocol a call spoke (its auth, request, response and error shapes). */
export const CallProtocol = Schema.Literal("openai", "anthropic")
export type CallProtocol = typeof CallProtocol.Type

/** The protocol an endpoint belongs to. */
export const protocolOfEndpoint = (endpoint: CallEndpoint): CallProtocol => (endpoint === "messages" ? "anthropic" : "openai")

/** How a recorded call ended: its HTTP status and, when it failed, the error (`code: message`). */
export type CallStatus = Pick<LlmCall, "status" | "error">

/**
 * A call refused because the conversation no longer fits the model's context (OpenAI's
 * `context_length_exceeded`). For a small-context policy this is how a long episode ends (the
 * harness stops there, like at its turn limit), so run summaries count it apart from the errors
 * reins must never cause. The Gateway records a refused call's error as `code: message`.
 */
export const isContextFull = (call: CallStatus) =>
  call.status === 400 && call.error !== null && call.error.startsWith("context_length_exceeded")

/** A call the harness saw fail for any other reason: what reins must never cause. */
export const isHarnessError = (call: CallStatus) =>
  call.status !== 200 && !isContextFull(call)

/** One model call as recorded before its response was sent (error calls too: `status` ≠ 200). */
export class LlmCall extends Schema.Class<LlmCall>("LlmCall")({
  id: Schema.String,
  rolloutId: Schema.String,
  attemptId: Schema.String,
  /** 1, 2, ... in the order the calls were recorded within the attempt. */
  seq: Schema.Int,
  endpoint: CallEndpoint,
  /** Calls recorded before protocols were recorded are all OpenAI's. */
  protocol: Schema.optionalWith(CallProtocol, { default: () => "openai" }),
  model: Schema.String,
  /** HTTP status the harness got (499: the client went away). */
  status: Schema.Int,
  error: Schema.NullOr(Schema.String),
  /** The request body (null when it was not valid JSON). */
  request: Schema.Unknown,
  /** The response body as a non-streaming response (null for errors). */
  response: Schema.Unknown,
  promptIds: Packed.Int32,
  outputIds: Packed.Int32,
  /** Per output token: log-probability under the policy that sampled it. */
  logprobs: Packed.Float32,
  /** Per output token: the policy version that sampled it. */
  versions: Packed.Int32,
  finishReason: Schema.NullOr(Schema.String),
  /** False when the exact ids or logprobs are unknown (an upstream that does not return them) or the call failed. */
  trainable: Schema.Boolean,
  reuse: PromptReuse,
  timings: CallTimings
}) {}

export class Reward extends Schema.Class<Reward>("Reward")({
  id: Schema.String,
  rolloutId: Schema.String,
  attemptId: Schema.String,
  /** Per-turn credit when set; a final reward of the rollout otherwise (the last final reward wins). */
  callId: Schema.NullOr(Schema.String),
  value: Schema.Number,
  info: Schema.Unknown,
  createdAt: Schema.Number
}) {}

/**
 * What one update did with one call's sampled tokens: the first `tokens` of its response were
 * trained with this advantage and this per-token loss weight (both are constant over a call's
 * response: advantages are per rollout or per turn, weights per segment), into `version`.
 */
export class TrainedCall extends Schema.Class<TrainedCall>("TrainedCall")({
  callId: Schema.String,
  rolloutId: Schema.String,
  /** The version the update produced. */
  version: Schema.Int,
  advantage: Schema.Number,
  /** The weight of each of its tokens in the step's loss (a step's weights sum to 1). */
  weight: Schema.Number,
  /** Response tokens trained, from the first (fewer than sampled when cut at the context limit). */
  tokens: Schema.Int
}) {}

export class ModelVersion extends Schema.Class<ModelVersion>("ModelVersion")({
  version: Schema.Int,
  modelId: Schema.String,
  info: Schema.Unknown,
  createdAt: Schema.Number
}) {}

export const EventType = Schema.Literal(
  "rollout.created",
  "attempt.created",
  "attempt.state",
  "call.recorded",
  "reward.recorded",
  "model.version",
  "gateway.paused",
  "gateway.resumed",
  /** A Trainer update's metrics (`VersionMetrics`), recorded by the run for the dashboard. */
  "trainer.version",
  /** An evaluation's result (pass@1 on a split), recorded by the run for the dashboard. */
  "evaluation"
)
export type EventType = typeof EventType.Type

/** One entry of the durable event log; `seq` increases by one per event. */
export class StoreEvent extends Schema.Class<StoreEvent>("StoreEvent")({
  seq: Schema.Int,
  at: Schema.Number,
  type: EventType,
  rolloutId: Schema.NullOr(Schema.String),
  attemptId: Schema.NullOr(Schema.String),
  data: Schema.Unknown
}) {}

/** The store could not do what was asked (I/O, corruption, constraint). */
export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  message: Schema.String
}) {}

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  entity: Schema.String,
  id: Schema.String
}) {
  override get message() {
    return `${this.entity} ${this.id} not found`
  }
}

/** The request conflicts with the current state (e.g. a retry while the rollout still has a live attempt). */
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", {
  message: Schema.String
}) {}

export class IllegalTransition extends Schema.TaggedError<IllegalTransition>()("IllegalTransition", {
  attemptId: Schema.String,
  from: AttemptState,
  to: AttemptState
}) {
  override get message() {
    return `attempt ${this.attemptId}: illegal transition ${this.from} → ${this.to}`
  }
}
