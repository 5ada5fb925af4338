/**
 * Qwen3-style reasoning: the reply starts with `<think>\n…\n</think>\n\n` and the answer follows.
 * The split is the inverse of how Qwen3's template writes an assistant turn back
 * (`'<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n')`), so a parsed
 * reply handed back as `{content, reasoning_content}` renders to the text the model produced.
 *
 * - `reasoning` is the text between `<think>` (optional: a template whose generation prompt
 *   already opened the block leaves it out of the reply) and the first `</think>`, with
 *   newlines stripped at both ends; `content` is what follows, with leading newlines stripped.
 * - No `</think>` at all: there is no reasoning block. When the reply opened one (`<think>` at
 *   its start) it was cut off: reported in `errors` and the text stays in `content` verbatim,
 *   as the Hermes parser does with an unclosed `<tool_call>`.
 * - Text only: the ids the Gateway records are the sampled ones whatever this returns.
 */
import type { ParsedOutput } from "./ParsedOutput.js"

export const THINK_OPEN = "<think>"
export const THINK_CLOSE = "</think>"

export const parseThinking = (text: string): ParsedOutput => {
  const close = text.indexOf(THINK_CLOSE)
  if (close < 0) {
    const opened = text.trimStart().startsWith(THINK_OPEN)
    const errors = opened ? [{ raw: text, message: `no closing ${THINK_CLOSE} (the generation may have been cut off)` }] : []
    return { content: text, toolCalls: [], errors }
  }
  const inner = text.slice(0, close).replace(/^\s*<think>/, "")
  return {
    content: text.slice(close + THINK_CLOSE.length).replace(/^\n+/, ""),
    reasoning: inner.replace(/^\n+|\n+$/g, ""),
    toolCalls: [],
    errors: []
  }
}
