/**
 * How one call continues an attempt's conversation: the rule the Trainer's segments
 * (`@reins/trainer` samples/segments.ts) and the dashboard's token view (`@reins/gateway`
 * dashboard/tokenView.ts) both join calls by, kept here so the two cannot drift apart.
 */
import type { LlmCall } from "./StoreSchema.js"
import type { SegmentStart } from "./TrainerSchema.js"

/** Whether `prompt` starts with `tail`'s exact ids (its prompt, then its output): the call extends `tail`'s chain. */
export const extendsCall = (prompt: Int32Array, tail: LlmCall): boolean => {
  const head = tail.promptIds
  const out = tail.outputIds
  if (prompt.length < head.length + out.length) return false
  for (let i = 0; i < head.length; i++) if (prompt[i] !== head[i]) return false
  for (let i = 0; i < out.length; i++) if (prompt[head.length + i] !== out[i]) return false
  return true
}

/**
 * Why `call` could not extend any open chain. The Gateway classified the break when it had to
 * re-tokenize; when it did reuse an earlier call's ids yet no chain ends there, the call branched
 * from inside a chain (a retry of the same prompt, a fork); with no record at all the history is
 * taken as edited.
 */
export const breakReason = (call: LlmCall): SegmentStart =>
  call.reuse.break ?? (call.reuse.fromCallId !== null ? "branched" : "history-edited")
