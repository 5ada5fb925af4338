/**
 * The sample adapter: one finished rollout → its segments, with every call that cannot be
 * trained counted by reason. Only successful (status 200), trainable calls whose per-token
 * arrays agree become tokens; the rest are counted in the returned tally, never skipped silently.
 */
import type { LlmCall } from "@reins/protocol"
import { DropTally } from "../drops.js"
import { buildSegments, type Segment, type SegmentOptions } from "./segments.js"
import { bySeq, type RolloutTrace, turnPositions } from "./trace.js"

export interface AdaptedRollout {
  readonly segments: ReadonlyArray<Segment>
  readonly drops: DropTally
}

/** Why a call cannot be trained, or null when it can. */
const unusable = (call: LlmCall) => {
  if (call.status !== 200) return "call-failed" as const
  if (!call.trainable) return "call-untrainable" as const
  const n = call.outputIds.length
  if (call.logprobs.length !== n || call.versions.length !== n) return "call-malformed" as const
  return null
}

export const adaptRollout = (trace: RolloutTrace, options: SegmentOptions): AdaptedRollout => {
  const drops = new DropTally()
  if (trace.superseded.calls > 0) drops.add("call-superseded", trace.superseded.calls, trace.superseded.actionTokens)
  const usable: Array<LlmCall> = []
  for (const call of bySeq(trace.calls)) {
    const reason = unusable(call)
    if (reason === null) usable.push(call)
    else drops.add(reason, 1, call.outputIds.length)
  }
  const context = { rolloutId: trace.rolloutId, groupId: trace.groupId, attemptId: trace.attemptId, turns: turnPositions(trace.calls) }
  return { segments: buildSegments(usable, context, options, drops), drops }
}
