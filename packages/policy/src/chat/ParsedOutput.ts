/** What every output parser returns: the model's text split into what the client sees. */
import type { ParsedToolCall, ToolCallParseError } from "./ToolCallParser.js"

export interface ParsedOutput {
  /** The text outside reasoning and successful tool calls ("" is OpenAI's `null` with calls). */
  readonly content: string
  /** The reasoning text (`reasoning_content`); present exactly when the output had a reasoning block. */
  readonly reasoning?: string | undefined
  readonly toolCalls: ReadonlyArray<ParsedToolCall>
  /** Calls (or a reasoning block) that could not be used; their text stays in `content`. */
  readonly errors: ReadonlyArray<ToolCallParseError>
}

export interface OutputParseOptions {
  /** Tool-call ids by index within one response (deterministic ids for tests and replays). */
  readonly makeId?: ((index: number) => string) | undefined
}
