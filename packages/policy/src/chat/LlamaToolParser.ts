/**
 * Llama 3.1+ tool calls: the reply is one or more JSON objects `{"name": NAME, "parameters":
 * {...}}` (Meta's prompt format; "arguments" is accepted too), optionally after `<|python_tag|>`
 * and separated by `;` (Llama 3.2 writes several calls that way).
 *
 * Rules, as for the Hermes parser (ToolCallParser.ts) where they apply:
 * - Calls are only looked for at the start of the reply (after whitespace), because the format
 *   has no opening tag: a reply that starts with anything else is plain content.
 * - A reply that starts with a JSON object WITHOUT a "name" key and no `<|python_tag|>` is an
 *   ordinary JSON answer, not a call: content, no error.
 * - A call that cannot be used (invalid JSON, never closed, bad name or parameters) is reported
 *   in `errors` and its text stays in `content` verbatim; so does text after `<|python_tag|>`
 *   that is not JSON (Llama's built-in `brave_search.call(...)` syntax is not an OpenAI call).
 * - With successful calls, `content` is the remaining text trimmed and joined with "\n";
 *   without any, it is the reply unchanged. `arguments` is the exact text of "parameters".
 * `<|python_tag|>` is a special token: a decoder that skips special tokens never shows it, and
 * the bare-JSON rule covers that case.
 */
import { endOfJsonContainer, skipSpace } from "./jsonScan.js"
import type { OutputParseOptions, ParsedOutput } from "./ParsedOutput.js"
import { parseCallBody, randomCallIds, type ParsedToolCall, type ToolCallParseError } from "./ToolCallParser.js"

export const PYTHON_TAG = "<|python_tag|>"

const ARGUMENT_KEYS = ["parameters", "arguments"] as const

const hasName = (json: string): boolean => {
  try {
    const v: unknown = JSON.parse(json)
    return v !== null && typeof v === "object" && !Array.isArray(v) && "name" in v
  } catch {
    return true // invalid JSON at the start of a reply is a broken call, reported as such
  }
}

export const parseLlama3JsonToolCalls = (text: string, options?: OutputParseOptions): ParsedOutput => {
  const plain: ParsedOutput = { content: text, toolCalls: [], errors: [] }
  let at = skipSpace(text, 0)
  const tagged = text.startsWith(PYTHON_TAG, at)
  if (tagged) at = skipSpace(text, at + PYTHON_TAG.length)
  if (text[at] !== "{") {
    if (!tagged) return plain
    const raw = text.slice(text.indexOf(PYTHON_TAG))
    return { ...plain, errors: [{ raw, message: `the text after ${PYTHON_TAG} is not a JSON tool call (built-in tool syntax such as brave_search.call(...) is not supported)` }] }
  }

  const calls: Array<Omit<ParsedToolCall, "id">> = []
  const errors: Array<ToolCallParseError> = []
  const rest: Array<string> = []
  for (let first = true; text[at] === "{"; first = false) {
    const end = endOfJsonContainer(text, at)
    if (end < 0) {
      errors.push({ raw: text.slice(at), message: "tool call JSON is never closed (the generation may have been cut off)" })
      rest.push(text.slice(at))
      at = text.length
      break
    }
    const raw = text.slice(at, end)
    if (first && !tagged && !hasName(raw)) return plain
    const parsed = parseCallBody(raw, ARGUMENT_KEYS)
    if (typeof parsed === "string") {
      errors.push({ raw, message: parsed })
      rest.push(raw)
    } else calls.push(parsed)
    at = skipSpace(text, end)
    if (text[at] === ";") at = skipSpace(text, at + 1)
  }
  rest.push(text.slice(at))

  if (calls.length === 0) return { ...plain, errors }
  const makeId = options?.makeId ?? randomCallIds()
  return {
    content: rest.map((r) => r.trim()).filter((r) => r.length > 0).join("\n"),
    toolCalls: calls.map((c, i) => ({ id: makeId(i), ...c })),
    errors
  }
}
