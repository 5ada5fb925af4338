/** Store entities as the admin API returns them (snake_case, token arrays as JSON arrays). */
import type { Attempt, LlmCall, Reward, Rollout, StoreEvent } from "@reins/protocol"
import type { RolloutSummary } from "../../store/Store.js"

export const rolloutJson = (r: Rollout) => ({
  id: r.id,
  task: r.task,
  group: r.group,
  state: r.state,
  attempts: r.attempts,
  reward: r.reward,
  created_at: r.createdAt,
  updated_at: r.updatedAt
})

const ENDED = new Set(["succeeded", "failed", "cancelled"])

/** A rollout as a list row: the rollout plus what its calls add up to (zeros when it made none). */
export const rolloutRowJson = (r: Rollout, s: RolloutSummary | undefined) => ({
  ...rolloutJson(r),
  calls: s?.calls ?? 0,
  prompt_tokens: s?.promptTokens ?? 0,
  output_tokens: s?.outputTokens ?? 0,
  versions: { min: s?.minVersion ?? null, max: s?.maxVersion ?? null },
  /** Creation to the last change, for an ended rollout; null while it runs. */
  duration_ms: ENDED.has(r.state) ? r.updatedAt - r.createdAt : null
})

export const attemptJson = (a: Attempt) => ({
  id: a.id,
  rollout_id: a.rolloutId,
  index: a.index,
  state: a.state,
  reason: a.reason,
  created_at: a.createdAt,
  started_at: a.startedAt,
  finished_at: a.finishedAt
})

export const callJson = (c: LlmCall) => ({
  id: c.id,
  rollout_id: c.rolloutId,
  attempt_id: c.attemptId,
  seq: c.seq,
  endpoint: c.endpoint,
  protocol: c.protocol,
  model: c.model,
  status: c.status,
  error: c.error,
  trainable: c.trainable,
  finish_reason: c.finishReason,
  prompt_token_ids: Array.from(c.promptIds),
  output_token_ids: Array.from(c.outputIds),
  output_logprobs: Array.from(c.logprobs),
  versions: Array.from(c.versions),
  reuse: { reused_tokens: c.reuse.reusedTokens, from_call_id: c.reuse.fromCallId, break: c.reuse.break },
  timings: {
    received_at: c.timings.receivedAt,
    started_at: c.timings.startedAt,
    first_token_at: c.timings.firstTokenAt,
    finished_at: c.timings.finishedAt,
    held_ms: c.timings.heldMs
  },
  request: c.request,
  response: c.response
})

/**
 * A value JSON can write back, or null: a body nested deeper than the stack (accepted and stored
 * as received, answered 400) would otherwise turn every view of its rollout into a 500.
 */
const renderable = (value: unknown): boolean => {
  try {
    JSON.stringify(value)
    return true
  } catch {
    return false
  }
}

/** `callJson` for a call whose request or response JSON cannot write: those become null, and `unrenderable` names them. */
export const callJsonSafe = (c: LlmCall) => {
  const json = callJson(c)
  const bad = (["request", "response"] as const).filter((k) => !renderable(json[k]))
  if (bad.length === 0) return json
  return { ...json, ...Object.fromEntries(bad.map((k) => [k, null])), unrenderable: bad }
}

export const rewardJson = (r: Reward) => ({
  id: r.id,
  rollout_id: r.rolloutId,
  attempt_id: r.attemptId,
  call_id: r.callId,
  reward: r.value,
  info: r.info,
  created_at: r.createdAt
})

export const eventJson = (e: StoreEvent) => ({
  seq: e.seq,
  at: e.at,
  type: e.type,
  rollout_id: e.rolloutId,
  attempt_id: e.attemptId,
  data: e.data
})
