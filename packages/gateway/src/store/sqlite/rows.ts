/** The store's entities from the rows SQLite returns, and the JSON columns' encoding. */
import { Attempt, CallTimings, LlmCall, ModelVersion, PromptReuse, Reward, Rollout, StoreEvent, TrainedCall } from "@reins/protocol"
import { float32FromBlob, int32FromBlob } from "../packed.js"

export type Row = Record<string, any>

export const json = (u: unknown): string | null => (u === undefined || u === null ? null : JSON.stringify(u))
export const parseJson = (s: unknown): unknown => (typeof s === "string" ? JSON.parse(s) : null)

export const toRollout = (r: Row) =>
  new Rollout({
    id: r.id,
    task: parseJson(r.task),
    group: r.grp,
    state: r.state,
    attempts: r.attempts,
    reward: r.reward,
    createdAt: r.created_at,
    updatedAt: r.updated_at
  }, true)

export const toAttempt = (r: Row) =>
  new Attempt({
    id: r.id,
    rolloutId: r.rollout_id,
    index: r.idx,
    state: r.state,
    reason: r.reason,
    createdAt: r.created_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at
  }, true)

/** A call; a row read without its `request` and `response` columns gets null bodies. */
export const toCall = (r: Row) =>
  new LlmCall({
    id: r.id,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    seq: r.seq,
    endpoint: r.endpoint,
    protocol: r.protocol,
    model: r.model,
    status: r.status,
    error: r.error,
    request: parseJson(r.request),
    response: parseJson(r.response),
    promptIds: int32FromBlob(r.prompt_ids),
    outputIds: int32FromBlob(r.output_ids),
    logprobs: float32FromBlob(r.logprobs),
    versions: int32FromBlob(r.versions),
    finishReason: r.finish_reason,
    trainable: r.trainable === 1,
    reuse: new PromptReuse({ reusedTokens: r.reused_tokens, fromCallId: r.reuse_from, break: r.break_reason }, true),
    timings: new CallTimings({
      receivedAt: r.received_at,
      startedAt: r.started_at,
      firstTokenAt: r.first_token_at,
      finishedAt: r.finished_at,
      heldMs: r.held_ms
    }, true)
  }, true)

export const toReward = (r: Row) =>
  new Reward({
    id: r.id,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    callId: r.call_id,
    value: r.value,
    info: parseJson(r.info),
    createdAt: r.created_at
  }, true)

export const toModelVersion = (r: Row) =>
  new ModelVersion({ version: r.version, modelId: r.model_id, info: parseJson(r.info), createdAt: r.created_at }, true)

export const toTrainedCall = (r: Row) =>
  new TrainedCall({ callId: r.call_id, rolloutId: r.rollout_id, version: r.version, advantage: r.advantage, weight: r.weight, tokens: r.tokens }, true)

export const toEvent = (r: Row) =>
  new StoreEvent({
    seq: r.seq,
    at: r.at,
    type: r.type,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    data: parseJson(r.data)
  }, true)
