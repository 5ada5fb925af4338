/**
 * The policy's text helpers the Gateway needs at run time (incremental detokenization and the
 * model family's output parsers). Loaded on demand, when a policy backend starts, and from
 * `@reins/policy/text`, which carries neither the model nor TensorFlow.js.
 */
import type { OutputParsers, ParsedOutput, ParseOutputOptions, Tokenizer, ToolParserName } from "@reins/policy/text"
import { Effect } from "effect"

export interface TextCodec {
  readonly streamDecoder: (tokenizer: Tokenizer) => { push(ids: number | ArrayLike<number>): string; flush(): string }
  /** Reasoning, then tool calls in the rest, with the model's parsers. */
  readonly parseOutput: (text: string, parsers: OutputParsers, options?: ParseOutputOptions) => ParsedOutput
  /** The text that opens a tool call, per tool parser (llama3_json's calls are JSON at the start: `{`). */
  readonly toolCallOpen: Readonly<Record<ToolParserName, ReadonlyArray<string>>>
  /**
   * Special tokens a tool parser reads, so the output text keeps them (every other special
   * token, such as the end of turn, is not text).
   */
  readonly parserTokens: Readonly<Record<ToolParserName, ReadonlyArray<string>>>
  readonly thinkOpen: string
  readonly thinkClose: string
}

export const loadTextCodec: Effect.Effect<TextCodec> = Effect.promise(() => import("@reins/policy/text")).pipe(
  Effect.map((policy) => ({
    streamDecoder: (tokenizer) => new policy.StreamDecoder(tokenizer),
    parseOutput: (text, parsers, options) => policy.parseOutput(text, parsers, options),
    toolCallOpen: { hermes: [policy.TOOL_CALL_OPEN], llama3_json: [policy.PYTHON_TAG, "{"], mistral: [policy.TOOL_CALLS_TOKEN], none: [] },
    // Mistral's call syntax is made of control tokens (see MistralToolParser.ts).
    parserTokens: { hermes: [], llama3_json: [policy.PYTHON_TAG], mistral: [policy.TOOL_CALLS_TOKEN, "[ARGS]", "[CALL_ID]"], none: [] },
    thinkOpen: policy.THINK_OPEN,
    thinkClose: policy.THINK_CLOSE
  }))
)
