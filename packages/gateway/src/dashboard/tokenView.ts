/**
 * A rollout's token view: its attempts' trainable calls joined into segments the way the Trainer
 * joins them (`chain` mode of @reins/trainer's samples/segments.ts, through the same rule,
 * @reins/protocol's Chain.ts): a call extends a segment when its prompt ids start with the
 * segment's ids so far, otherwise it starts a new one, whose break reason is the Gateway's reuse
 * record. Every token
 * of a segment gets a role — `prompt` (before the first response), `observation` (added between
 * responses) or `action` (sampled, trained) — and actions their logprob and policy version.
 *
 * The Trainer's own rows may still differ where its settings cut them (context-limit drops), so
 * what an update trained is joined by call: each trained call's first `tokens` response tokens get
 * the advantage and loss weight the Trainer recorded for it (the latest update's, if several).
 */
import { breakReason, extendsCall, type LlmCall, type TrainedCall } from "@reins/protocol"

export type TokenRole = "prompt" | "observation" | "action"

export interface SegmentCall {
  readonly callId: string
  readonly seq: number
  /** The call's response tokens are `tokens[start, end)` of the segment. */
  readonly start: number
  readonly end: number
  readonly reusedTokens: number
  readonly reusedFrom: string | null
  readonly finishReason: string | null
  /** What the latest update that trained this call gave its tokens; null when none did. */
  readonly trained: TrainedCall | null
}

export interface ViewSegment {
  readonly attemptId: string
  readonly index: number
  /** `first`, a break reason (`history-edited`, `template`, `retokenized`, `truncated`) or `branched`. */
  readonly start: string
  readonly tokenIds: ReadonlyArray<number>
  readonly roles: ReadonlyArray<TokenRole>
  /** Per token: the sampling logprob of an action, null elsewhere. */
  readonly logprobs: ReadonlyArray<number | null>
  /** Per token: the policy version of an action, null elsewhere. */
  readonly versions: ReadonlyArray<number | null>
  /** Per token: the advantage a trained action received, null elsewhere. */
  readonly advantages: ReadonlyArray<number | null>
  /** Per token: the loss weight a trained action received, null elsewhere. */
  readonly weights: ReadonlyArray<number | null>
  readonly calls: ReadonlyArray<SegmentCall>
}

interface Open {
  readonly start: string
  readonly calls: Array<LlmCall>
  tail: LlmCall
}

/** The segments of one attempt, from its calls in `seq` order (untrainable ones are left out, as the Trainer leaves them). */
export const attemptSegments = (
  attemptId: string,
  calls: ReadonlyArray<LlmCall>,
  firstIndex: number,
  trained: ReadonlyMap<string, TrainedCall> = new Map()
): ReadonlyArray<ViewSegment> => {
  const open: Array<Open> = []
  const byTail = new Map<string, Open>()
  for (const call of calls) {
    if (!call.trainable || call.status !== 200) continue
    const hinted = call.reuse.fromCallId === null ? undefined : byTail.get(call.reuse.fromCallId)
    const latest = open[open.length - 1]
    let segment = hinted !== undefined && extendsCall(call.promptIds, hinted.tail) ? hinted : latest !== undefined && extendsCall(call.promptIds, latest.tail) ? latest : undefined
    if (segment === undefined) {
      segment = { start: open.length === 0 ? "first" : breakReason(call), calls: [], tail: call }
      open.push(segment)
    }
    byTail.delete(segment.tail.id)
    segment.tail = call
    byTail.set(call.id, segment)
    segment.calls.push(call)
  }
  return open.map((s, i) => materialize(attemptId, s, firstIndex + i, trained))
}

const materialize = (attemptId: string, segment: Open, index: number, trained: ReadonlyMap<string, TrainedCall>): ViewSegment => {
  const last = segment.tail
  const tokenIds = [...last.promptIds, ...last.outputIds]
  const firstPrompt = segment.calls[0]!.promptIds.length
  const roles: Array<TokenRole> = tokenIds.map((_, i) => (i < firstPrompt ? "prompt" : "observation"))
  const logprobs: Array<number | null> = tokenIds.map(() => null)
  const versions: Array<number | null> = tokenIds.map(() => null)
  const advantages: Array<number | null> = tokenIds.map(() => null)
  const weights: Array<number | null> = tokenIds.map(() => null)
  const calls = segment.calls.map((call): SegmentCall => {
    const start = call.promptIds.length
    const update = trained.get(call.id) ?? null
    for (let k = 0; k < call.outputIds.length; k++) {
      roles[start + k] = "action"
      logprobs[start + k] = call.logprobs[k] ?? null
      versions[start + k] = call.versions[k] ?? null
      if (update !== null && k < update.tokens) {
        advantages[start + k] = update.advantage
        weights[start + k] = update.weight
      }
    }
    return {
      callId: call.id,
      seq: call.seq,
      start,
      end: start + call.outputIds.length,
      reusedTokens: call.reuse.reusedTokens,
      reusedFrom: call.reuse.fromCallId,
      finishReason: call.finishReason,
      trained: update
    }
  })
  return { attemptId, index, start: segment.start, tokenIds, roles, logprobs, versions, advantages, weights, calls }
}

/** Every segment of a rollout, attempt by attempt; `calls` in attempt then `seq` order. */
export const rolloutSegments = (
  attempts: ReadonlyArray<{ readonly id: string }>,
  calls: ReadonlyArray<LlmCall>,
  trained: ReadonlyArray<TrainedCall> = []
): ReadonlyArray<ViewSegment> => {
  // Ordered by version: the latest update of a call wins.
  const byCall = new Map(trained.map((t) => [t.callId, t]))
  const out: Array<ViewSegment> = []
  for (const attempt of attempts) out.push(...attemptSegments(attempt.id, calls.filter((c) => c.attemptId === attempt.id), out.length, byCall))
  return out
}
