/**
 * Calls → segments. In `chain` mode a call extends an open segment when its prompt ids start with
 * the segment's exact ids so far (the prompt + output of the segment's last call): the prompt
 * tokens in between are observations (loss mask 0), the response tokens are actions (mask 1,
 * with the logprob and policy version recorded when they were sampled). Any other call starts a
 * new segment, classified by the Gateway's reuse record. In `per-call` mode every call is a
 * segment of its own.
 *
 * Because a chain's prompts contain everything before them, a segment's tokens are simply its
 * last kept call's prompt + response; earlier calls only mark their response ranges as actions.
 *
 * Context limit (`maxTokens`): a call whose prompt leaves no room for a response token is dropped
 * (`prompt-overlong`) and so are the later calls of its chain (their prompts only grow); a
 * response that runs past the limit is cut there (`response-truncated`), the part that fits is
 * trained. Left-truncating a prompt instead would train tokens on a context they were not
 * sampled with.
 */
import { breakReason, extendsCall, type LlmCall, type SegmentMode, type SegmentStart } from "@reins/protocol"
import type { DropTally } from "../drops.js"
import type { RolloutTrace } from "./trace.js"

/** The response tokens of one call inside a segment: `tokens[start, end)`. */
export interface CallSpan {
  readonly callId: string
  /** The call's turn position in its attempt (see `turnPositions`). */
  readonly turn: number
  readonly start: number
  readonly end: number
}

/** The rollout, task group and attempt a segment belongs to. */
type Ids = Pick<RolloutTrace, "rolloutId" | "groupId" | "attemptId">

/** One training row before advantages and weights. */
export interface Segment extends Ids {
  /** 0, 1, ... within the rollout, in the order the segments started. */
  readonly index: number
  readonly start: SegmentStart
  readonly tokens: Int32Array
  /** 1 on action tokens (sampled by the policy), 0 on prompt and observation tokens. */
  readonly lossMask: Uint8Array
  /** Log-probability of each action token under the policy that sampled it; 0 elsewhere. */
  readonly behaviorLogprobs: Float32Array
  /** The policy version that sampled each action token; -1 elsewhere. */
  readonly versions: Int32Array
  readonly spans: ReadonlyArray<CallSpan>
  readonly actionTokens: number
}

export interface SegmentOptions {
  readonly mode: SegmentMode
  /** Tokens per training row. */
  readonly maxTokens: number
}

export interface SegmentContext extends Ids {
  readonly turns: ReadonlyMap<string, number>
}

interface Kept {
  readonly call: LlmCall
  /** Response tokens kept (fewer than the call's when cut at the context limit). */
  readonly keep: number
}

/** A segment being built. Its tail is the exact ids the next call of the chain must start with. */
interface Open {
  readonly start: SegmentStart
  readonly kept: Array<Kept>
  tail: LlmCall
}

/** Builds the segments of one attempt from its trainable calls, in `seq` order. */
export const buildSegments = (
  calls: ReadonlyArray<LlmCall>,
  context: SegmentContext,
  options: SegmentOptions,
  drops: DropTally
): ReadonlyArray<Segment> => {
  const open: Array<Open> = []
  // The open segment each call id currently ends, to follow the Gateway's `fromCallId` hint in O(1).
  const byTail = new Map<string, Open>()

  const target = (call: LlmCall): Open | undefined => {
    if (options.mode === "per-call") return undefined
    const hinted = call.reuse.fromCallId === null ? undefined : byTail.get(call.reuse.fromCallId)
    if (hinted !== undefined && extendsCall(call.promptIds, hinted.tail)) return hinted
    const latest = open[open.length - 1]
    return latest !== undefined && latest !== hinted && extendsCall(call.promptIds, latest.tail) ? latest : undefined
  }

  for (const call of calls) {
    let segment = target(call)
    if (segment === undefined) {
      const start: SegmentStart = open.length === 0 ? "first" : options.mode === "per-call" ? "per-call" : breakReason(call)
      segment = { start, kept: [], tail: call }
      open.push(segment)
    }
    byTail.delete(segment.tail.id)
    segment.tail = call
    byTail.set(call.id, segment)

    const room = options.maxTokens - call.promptIds.length
    const out = call.outputIds.length
    if (room <= 0) {
      drops.add("prompt-overlong", 1, out)
      continue
    }
    const keep = Math.min(room, out)
    if (keep < out) drops.add("response-truncated", 1, out - keep)
    segment.kept.push({ call, keep })
  }

  const segments: Array<Segment> = []
  for (const segment of open) {
    // Only overlong calls: already counted one by one.
    if (segment.kept.length === 0) continue
    const built = materialize(segment, context, segments.length)
    if (built.actionTokens === 0) drops.add("segment-empty")
    else segments.push(built)
  }
  return segments
}

const materialize = (segment: Open, context: SegmentContext, index: number): Segment => {
  const last = segment.kept[segment.kept.length - 1]!
  const promptLength = last.call.promptIds.length
  const length = promptLength + last.keep
  const tokens = new Int32Array(length)
  tokens.set(last.call.promptIds)
  tokens.set(last.call.outputIds.subarray(0, last.keep), promptLength)
  const lossMask = new Uint8Array(length)
  const behaviorLogprobs = new Float32Array(length)
  const versions = new Int32Array(length).fill(-1)
  const spans: Array<CallSpan> = []
  let actionTokens = 0
  for (const { call, keep } of segment.kept) {
    const start = call.promptIds.length
    lossMask.fill(1, start, start + keep)
    behaviorLogprobs.set(call.logprobs.subarray(0, keep), start)
    versions.set(call.versions.subarray(0, keep), start)
    spans.push({ callId: call.id, turn: context.turns.get(call.id) ?? 0, start, end: start + keep })
    actionTokens += keep
  }
  return {
    rolloutId: context.rolloutId,
    groupId: context.groupId,
    attemptId: context.attemptId,
    index,
    start: segment.start,
    tokens,
    lossMask,
    behaviorLogprobs,
    versions,
    spans,
    actionTokens
  }
}
