/**
 * The policy's text helpers the Gateway needs at run time (incremental detokenization and
 * tool-call parsing). Loaded on demand, when a policy backend starts, and from
 * `@reins/policy/text`, which carries neither the model nor TensorFlow.js.
 */
import type { ParsedAssistantText, Tokenizer } from "@reins/policy/text"
import { Effect } from "effect"

export interface TextCodec {
  readonly streamDecoder: (tokenizer: Tokenizer) => { push(ids: number | ArrayLike<number>): string; flush(): string }
  readonly parseToolCalls: (text: string) => ParsedAssistantText
  /** The tag that opens a tool call in the model's text. */
  readonly toolCallOpen: string
}

export const loadTextCodec: Effect.Effect<TextCodec> = Effect.promise(() => import("@reins/policy/text")).pipe(
  Effect.map((policy) => ({
    streamDecoder: (tokenizer) => new policy.StreamDecoder(tokenizer),
    parseToolCalls: (text) => policy.parseToolCalls(text),
    toolCallOpen: policy.TOOL_CALL_OPEN
  }))
)
