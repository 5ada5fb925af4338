/**
 * The one interface to everything the Gateway records. The embedded implementation is SQLite
 * (`SqliteStore`); a PostgreSQL implementation serving several gateways would implement the same
 * service. Every write is durable when its Effect succeeds.
 */
import type {
  Attempt,
  AttemptState,
  CallEndpoint,
  CallProtocol,
  CallStatus,
  CallTimings,
  Conflict,
  EventType,
  IllegalTransition,
  LlmCall,
  ModelVersion,
  NotFound,
  PromptReuse,
  Reward,
  Rollout,
  StoreError,
  StoreEvent,
  TrainedCall
} from "@reins/protocol"
import { Context, type Effect, type Option, type Schema, type Stream } from "effect"

export interface NewRollout {
  readonly task: unknown
  readonly group?: string | null | undefined
  /** Start the first attempt right away (`running`) instead of leaving it `queued`. */
  readonly start?: boolean | undefined
}

/** A new attempt and its key. The key is returned only here; the store keeps its hash. */
export interface IssuedAttempt {
  readonly rollout: Rollout
  readonly attempt: Attempt
  readonly key: string
}

export interface NewCall {
  readonly attemptId: string
  readonly endpoint: CallEndpoint
  /** Default: the endpoint's protocol. */
  readonly protocol?: CallProtocol | undefined
  readonly model: string
  readonly status: number
  readonly error: string | null
  readonly request: unknown
  readonly response: unknown
  /** `request` as JSON text when the caller already has it (the body as received): stored as is. */
  readonly requestJson?: string | undefined
  /** `response` as JSON text when the caller already has it: stored as is. */
  readonly responseJson?: string | undefined
  readonly promptIds: Int32Array
  readonly outputIds: Int32Array
  readonly logprobs: Float32Array
  readonly versions: Int32Array
  readonly finishReason: string | null
  readonly trainable: boolean
  readonly reuse: Schema.Struct.Type<typeof PromptReuse.fields>
  readonly timings: Schema.Struct.Type<typeof CallTimings.fields>
}

export interface NewReward {
  readonly attemptId: string
  readonly callId?: string | null | undefined
  readonly value: number
  readonly info?: unknown
}

export interface RolloutQuery {
  readonly state?: AttemptState | undefined
  readonly group?: string | undefined
  /** 1..500, default 50. */
  readonly limit?: number | undefined
  /** The `next` cursor of the previous page. */
  readonly cursor?: string | undefined
  /** Only rollouts with at least one token sampled by this policy version. */
  readonly version?: number | undefined
  /** Only rollouts whose final reward is at least / at most this (rollouts without one are left out). */
  readonly minReward?: number | undefined
  readonly maxReward?: number | undefined
}

/** Newest first. */
export interface RolloutPage {
  readonly rollouts: ReadonlyArray<Rollout>
  readonly next: string | null
}

/** What a rollout's calls add up to, for a table row (no token arrays leave the store). */
export interface RolloutSummary {
  readonly rolloutId: string
  readonly calls: number
  readonly promptTokens: number
  readonly outputTokens: number
  /** The oldest and newest policy versions among its sampled tokens; null when it has none. */
  readonly minVersion: number | null
  readonly maxVersion: number | null
}

export interface RolloutDetail {
  readonly rollout: Rollout
  readonly attempts: ReadonlyArray<Attempt>
  readonly calls: ReadonlyArray<LlmCall>
  readonly rewards: ReadonlyArray<Reward>
}

/** The latest attempt of a rollout that has not ended, with the rollout's task and group. */
export interface UnfinishedRollout {
  readonly attempt: Attempt
  readonly task: unknown
  readonly group: string | null
}

export interface StoreService {
  readonly createRollout: (input: NewRollout) => Effect.Effect<IssuedAttempt, StoreError>
  /** A retry: a new attempt of a rollout whose latest attempt has ended. */
  readonly createAttempt: (
    rolloutId: string,
    options?: { readonly start?: boolean }
  ) => Effect.Effect<IssuedAttempt, StoreError | NotFound | Conflict>
  /** The attempt an attempt key belongs to (looked up by its hash). */
  readonly attemptByKey: (key: string) => Effect.Effect<Option.Option<Attempt>, StoreError>
  readonly attempt: (id: string) => Effect.Effect<Attempt, StoreError | NotFound>
  /** Moves an attempt along its state machine; illegal moves fail and change nothing. */
  readonly transition: (
    attemptId: string,
    to: AttemptState,
    reason?: string | null
  ) => Effect.Effect<Attempt, StoreError | NotFound | IllegalTransition>
  /** Durable when it succeeds; assigns the call's id and its sequence number within the attempt. */
  readonly recordCall: (call: NewCall) => Effect.Effect<LlmCall, StoreError | NotFound>
  readonly call: (id: string) => Effect.Effect<LlmCall, StoreError | NotFound>
  /** The calls of an attempt in `seq` order (only those after `afterSeq` when given). */
  readonly calls: (attemptId: string, afterSeq?: number) => Effect.Effect<ReadonlyArray<LlmCall>, StoreError>
  readonly addReward: (reward: NewReward) => Effect.Effect<Reward, StoreError | NotFound>
  /** Everything recorded for a rollout, calls with their request and response bodies (the dashboard's read). */
  readonly rollout: (id: string) => Effect.Effect<RolloutDetail, StoreError | NotFound>
  /** A rollout's trace, as the Trainer reads it: as `rollout`, but its calls without bodies (`request`, `response` null). */
  readonly rolloutTrace: (id: string) => Effect.Effect<RolloutDetail, StoreError | NotFound>
  /** The attempt's final reward: the last one recorded without a `callId`, null when none. */
  readonly finalReward: (rolloutId: string, attemptId: string) => Effect.Effect<number | null, StoreError>
  /** Every rollout whose latest attempt is `queued` or `running`, oldest first: one query (restart recovery). */
  readonly unfinished: Effect.Effect<ReadonlyArray<UnfinishedRollout>, StoreError>
  readonly rollouts: (query: RolloutQuery) => Effect.Effect<RolloutPage, StoreError>
  /** The summaries of these rollouts (one query over their calls; rollouts without calls are absent). */
  readonly rolloutSummaries: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<RolloutSummary>, StoreError>
  /** Status and error of every call that did not succeed (status ≠ 200), outside cancelled rollouts. */
  readonly failedCalls: Effect.Effect<ReadonlyArray<CallStatus>, StoreError>
  /** Idempotent per version. */
  readonly recordModelVersion: (v: {
    readonly version: number
    readonly modelId: string
    readonly info?: unknown
  }) => Effect.Effect<ModelVersion, StoreError>
  readonly modelVersions: Effect.Effect<ReadonlyArray<ModelVersion>, StoreError>
  /** What an update trained of each call (one transaction; a call trained again into the same version is replaced). */
  readonly recordTrained: (calls: ReadonlyArray<TrainedCall>) => Effect.Effect<void, StoreError>
  /** What every update trained of a rollout's calls, by version then call. */
  readonly trainedCalls: (rolloutId: string) => Effect.Effect<ReadonlyArray<TrainedCall>, StoreError>
  /** Appends an event that is not a side effect of another write (e.g. gateway pause/resume). */
  readonly recordEvent: (type: EventType, data: unknown) => Effect.Effect<StoreEvent, StoreError>
  /** Events with `seq > after`, first from the log, then live as they are recorded. Never ends by itself. */
  readonly events: (after: number) => Stream.Stream<StoreEvent, StoreError>
}

export class Store extends Context.Tag("@reins/gateway/Store")<Store, StoreService>() {}
