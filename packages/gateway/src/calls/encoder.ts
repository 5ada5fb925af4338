/**
 * What a protocol codec gives the engine path to answer in its shape (step 7 of a call): the JSON
 * body, or the stream of events. The engine path owns everything else — admission, generation,
 * parsing, the one record before the answer — so adding a protocol adds an encoder, not a path.
 */
import type { GenerateChunk } from "@reins/protocol"
import type { ApiError } from "../http/errors.js"
import type { FinalOutput, Streamed } from "../openai/output.js"
import type { Sampled } from "./env.js"

/** How the generation ended, as every protocol can say it. */
export type Finish = "stop" | "length" | "tool_calls"

/** A finished generation: what the answer and the record are made of. */
export interface Generated {
  readonly output: FinalOutput
  readonly finish: Finish
  readonly promptIds: Int32Array
  readonly sampled: Sampled
}

/** Does the reply have a reasoning block (non-empty reasoning)? */
export const hasReasoning = (g: Generated) => (g.output.reasoning ?? "") !== ""

/** Does the reply have text to answer with (text, or neither text nor tool calls)? */
export const hasText = (g: Generated) => g.output.content !== "" || g.output.toolCalls.length === 0

/** One call's encoder (it may keep stream state: create one per call). */
export interface ReplyEncoder {
  /** The protocol's id for a parsed tool call (parsers name them `call_…`). */
  readonly callId: (parsed: string) => string
  /** The non-streaming response body; it is also what is recorded for a streamed call. */
  readonly body: (g: Generated) => unknown
  /** Events sent before the first token. */
  readonly start: () => ReadonlyArray<Uint8Array>
  /** Events for a sampled chunk and the text it made visible (either may be empty). */
  readonly chunk: (chunk: GenerateChunk, text: Streamed) => ReadonlyArray<Uint8Array>
  /** The closing events, sent once the call is recorded (`body` is what was recorded). */
  readonly end: (g: Generated, body: unknown) => ReadonlyArray<Uint8Array>
  /** The event that tells a streaming client the call failed. */
  readonly error: (e: ApiError) => ReadonlyArray<Uint8Array>
}
