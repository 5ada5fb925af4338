/**
 * Output parsers by model family: tool-call formats and reasoning blocks. Every parser is a pure
 * function of the generated text (`ParsedOutput`); the names are vLLM's (`--tool-call-parser`,
 * `--reasoning-parser`) so a user who serves the model there already knows them.
 *
 *   hermes       `<tool_call>{"name", "arguments"}</tool_call>` (Qwen2.5, Qwen3, reins's ChatML)
 *   llama3_json  `{"name", "parameters"}`, optionally after `<|python_tag|>` (Llama 3.1+)
 *   mistral      `[TOOL_CALLS]…` (Mistral, Mixtral, Nemo, Small)
 *   qwen3        reasoning in `<think>…</think>` before the answer
 *
 * `parseOutput` splits off the reasoning first and looks for tool calls only in what follows:
 * a call the model merely thought about is not made.
 */
import { Schema } from "effect"
import { parseLlama3JsonToolCalls } from "./LlamaToolParser.js"
import { parseMistralToolCalls } from "./MistralToolParser.js"
import type { OutputParseOptions, ParsedOutput } from "./ParsedOutput.js"
import { parseThinking } from "./ReasoningParser.js"
import { parseToolCalls } from "./ToolCallParser.js"

export const TOOL_PARSERS = ["hermes", "llama3_json", "mistral", "none"] as const
export const REASONING_PARSERS = ["qwen3", "none"] as const

export const ToolParserName = Schema.Literal(...TOOL_PARSERS)
export type ToolParserName = typeof ToolParserName.Type
export const ReasoningParserName = Schema.Literal(...REASONING_PARSERS)
export type ReasoningParserName = typeof ReasoningParserName.Type

/** The model's parser settings (e.g. in a run config); absent or "auto" means detected. */
export const OutputParsersConfig = Schema.Struct({
  toolParser: Schema.optional(Schema.Literal(...TOOL_PARSERS, "auto")),
  reasoningParser: Schema.optional(Schema.Literal(...REASONING_PARSERS, "auto"))
})
export type OutputParsersConfig = typeof OutputParsersConfig.Type

export interface OutputParsers {
  readonly tool: ToolParserName
  readonly reasoning: ReasoningParserName
}

export type OutputParser = (text: string, options?: OutputParseOptions) => ParsedOutput

const noToolCalls: OutputParser = (text) => ({ content: text, toolCalls: [], errors: [] })

export const toolParsers: Readonly<Record<ToolParserName, OutputParser>> = {
  hermes: parseToolCalls,
  llama3_json: parseLlama3JsonToolCalls,
  mistral: parseMistralToolCalls,
  none: noToolCalls
}

export const reasoningParsers: Readonly<Record<ReasoningParserName, (text: string) => ParsedOutput>> = {
  qwen3: parseThinking,
  none: noToolCalls
}

export interface ParseOutputOptions extends OutputParseOptions {
  /** False when the request does not allow tool calls (`tool_choice: "none"`, no tools). */
  readonly parseTools?: boolean | undefined
}

/** Reasoning first, then tool calls in the rest; errors of both, reasoning's first. */
export const parseOutput = (text: string, parsers: OutputParsers, options?: ParseOutputOptions): ParsedOutput => {
  const thought = reasoningParsers[parsers.reasoning](text)
  const tools = options?.parseTools === false ? "none" : parsers.tool
  const called = toolParsers[tools](thought.content, options)
  return {
    content: called.content,
    ...(thought.reasoning === undefined ? {} : { reasoning: thought.reasoning }),
    toolCalls: called.toolCalls,
    errors: [...thought.errors, ...called.errors]
  }
}
