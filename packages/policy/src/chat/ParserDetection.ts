/**
 * Which output parsers a model needs, from its config or, failing that, its chat template: the
 * template is the one place that states the format the model was trained to write, because it
 * writes earlier calls back into the prompt in that format.
 *
 * Rule (first match wins; `config` fields other than "auto" override the detection):
 *   tool parser   template text contains `[TOOL_CALLS]`                    → mistral
 *                 … contains `<tool_call>`                                 → hermes
 *                 … contains `<|python_tag|>`, or both `ipython` and
 *                   `"parameters"` (Llama 3.2/3.3 write calls without the tag) → llama3_json
 *                 otherwise (no template, or one without tool calls)        → none
 *   reasoning     template text contains both `<think>` and `</think>`    → qwen3
 *                 otherwise                                                → none
 * A model with several named templates is detected from all of them together (the tool format
 * usually lives in `tool_use`). The order only matters for a template that mixes formats, which
 * none of these families' templates does.
 */
import type { OutputParsers, OutputParsersConfig, ReasoningParserName, ToolParserName } from "./OutputParsers.js"

export interface DetectedParsers extends OutputParsers {
  /** Why each parser was chosen, for logs and `reins status`. */
  readonly why: { readonly tool: string; readonly reasoning: string }
}

const TOOL_RULES: ReadonlyArray<{ readonly parser: ToolParserName; readonly test: (t: string) => boolean; readonly why: string }> = [
  { parser: "mistral", test: (t) => t.includes("[TOOL_CALLS]"), why: "the chat template contains [TOOL_CALLS]" },
  { parser: "hermes", test: (t) => t.includes("<tool_call>"), why: "the chat template contains <tool_call>" },
  { parser: "llama3_json", test: (t) => t.includes("<|python_tag|>"), why: "the chat template contains <|python_tag|>" },
  { parser: "llama3_json", test: (t) => t.includes("ipython") && t.includes('"parameters"'), why: 'the chat template contains ipython and "parameters"' }
]

export const detectOutputParsers = (template: string | ReadonlyArray<string> | undefined, config?: OutputParsersConfig): DetectedParsers => {
  const text = template === undefined ? "" : typeof template === "string" ? template : template.join("\n")
  let tool: ToolParserName = "none"
  let toolWhy = template === undefined ? "no chat template" : "the chat template writes no tool calls this parser set knows"
  if (config?.toolParser !== undefined && config.toolParser !== "auto") {
    tool = config.toolParser
    toolWhy = "set in the config"
  } else {
    const rule = TOOL_RULES.find((r) => r.test(text))
    if (rule !== undefined) {
      tool = rule.parser
      toolWhy = rule.why
    }
  }
  let reasoning: ReasoningParserName = "none"
  let reasoningWhy = "the chat template has no <think> block"
  if (config?.reasoningParser !== undefined && config.reasoningParser !== "auto") {
    reasoning = config.reasoningParser
    reasoningWhy = "set in the config"
  } else if (text.includes("<think>") && text.includes("</think>")) {
    reasoning = "qwen3"
    reasoningWhy = "the chat template contains <think> and </think>"
  }
  return { tool, reasoning, why: { tool: toolWhy, reasoning: reasoningWhy } }
}
