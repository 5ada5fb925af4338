/**
 * Mistral tool calls, introduced by the `[TOOL_CALLS]` control token. Three shapes, by
 * tokenizer generation (all are accepted, whichever the model writes):
 *
 *   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1B2c3D4e"}, ...]   v3 (7B v0.3, Nemo)
 *   [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}                         v11+ (Small 3.2, Devstral)
 *   [TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{...}   and   [TOOL_CALLS]f{...}       (variants of v11+)
 *
 * Text before the first `[TOOL_CALLS]` is content. An id the model wrote is kept (the template
 * renders it back into the history); otherwise ids are 9 random alphanumerics, because Mistral's
 * templates raise on any other id shape when the conversation comes back. Broken calls are
 * handled as in the Hermes parser: reported in `errors`, their text left in `content`; with
 * successful calls the remaining text pieces are trimmed and joined with "\n".
 * `[TOOL_CALLS]`/`[ARGS]`/`[CALL_ID]` are special tokens: the decoder must keep their text.
 */
import { randomBytes } from "node:crypto"
import { endOfJsonContainer, skipSpace } from "./jsonScan.js"
import type { OutputParseOptions, ParsedOutput } from "./ParsedOutput.js"
import { parseCallBody, type ToolCallParseError } from "./ToolCallParser.js"

export const TOOL_CALLS_TOKEN = "[TOOL_CALLS]"
const ARGS_TOKEN = "[ARGS]"
const CALL_ID_TOKEN = "[CALL_ID]"

const ALPHANUMERIC = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

/** 9-character alphanumeric ids, the only shape Mistral's chat templates accept. */
export const mistralCallIds = (): ((index: number) => string) => {
  const seen = new Set<string>()
  return () => {
    for (;;) {
      const id = Array.from(randomBytes(9), (b) => ALPHANUMERIC[b % ALPHANUMERIC.length]).join("")
      if (!seen.has(id)) {
        seen.add(id)
        return id
      }
    }
  }
}

interface Found {
  readonly name: string
  readonly arguments: string
  readonly id?: string | undefined
}

type Piece = { readonly text: string } | { readonly call: Found }

/** One `[TOOL_CALLS]` segment (the text up to the next one) → pieces, errors. */
const parseSegment = (segment: string, errors: Array<ToolCallParseError>): Array<Piece> => {
  const raw = TOOL_CALLS_TOKEN + segment
  const fail = (message: string): Array<Piece> => {
    errors.push({ raw, message })
    return [{ text: raw }]
  }
  const start = skipSpace(segment, 0)
  if (segment[start] === "[") return parseArray(segment, start, raw, errors)

  let name: string
  let id: string | undefined
  let argsAt: number
  const argsTag = segment.indexOf(ARGS_TOKEN)
  if (argsTag >= 0) {
    const head = segment.slice(0, argsTag)
    const idTag = head.indexOf(CALL_ID_TOKEN)
    name = (idTag >= 0 ? head.slice(0, idTag) : head).trim()
    id = idTag >= 0 ? head.slice(idTag + CALL_ID_TOKEN.length).trim() : undefined
    argsAt = skipSpace(segment, argsTag + ARGS_TOKEN.length)
  } else {
    argsAt = segment.indexOf("{")
    if (argsAt < 0) return fail(`no arguments after the tool name (expected ${ARGS_TOKEN}{...}; the generation may have been cut off)`)
    name = segment.slice(0, argsAt).trim()
  }
  if (name.length === 0 || /\s/.test(name)) return fail(`tool call needs a function name before its arguments, got ${JSON.stringify(name)}`)
  if (segment[argsAt] !== "{") return fail(`tool call "${name}": the arguments must be a JSON object`)
  const end = endOfJsonContainer(segment, argsAt)
  if (end < 0) return fail(`tool call "${name}": the arguments JSON is never closed (the generation may have been cut off)`)
  let args: unknown
  try {
    args = JSON.parse(segment.slice(argsAt, end))
  } catch (e) {
    return fail(`tool call "${name}": the arguments are not valid JSON: ${(e as Error).message}`)
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) return fail(`tool call "${name}": the arguments must be a JSON object`)
  return [{ call: { name, arguments: segment.slice(argsAt, end), id: id || undefined } }, { text: segment.slice(end) }]
}

/** The v3 shape: a JSON array of `{"name", "arguments", "id"?}` objects. */
const parseArray = (segment: string, start: number, raw: string, errors: Array<ToolCallParseError>): Array<Piece> => {
  const end = endOfJsonContainer(segment, start)
  const message = end < 0 ? "the tool call array is never closed (the generation may have been cut off)" : arrayError(segment.slice(start, end))
  if (message !== undefined) {
    errors.push({ raw, message })
    return [{ text: raw }]
  }
  const pieces: Array<Piece> = []
  // Elements are objects (checked above): walk them to keep each one's exact text.
  for (let at = skipSpace(segment, start + 1); segment[at] === "{"; ) {
    const close = endOfJsonContainer(segment, at)
    const element = segment.slice(at, close)
    const parsed = parseCallBody(element)
    if (typeof parsed === "string") {
      errors.push({ raw: element, message: parsed })
      pieces.push({ text: element })
    } else {
      const id = (JSON.parse(element) as { id?: unknown }).id
      pieces.push({ call: { ...parsed, id: typeof id === "string" && id.length > 0 ? id : undefined } })
    }
    at = skipSpace(segment, close)
    if (segment[at] === ",") at = skipSpace(segment, at + 1)
  }
  pieces.push({ text: segment.slice(end) })
  return pieces
}

const arrayError = (json: string): string | undefined => {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (e) {
    return `the tool call array is not valid JSON: ${(e as Error).message}`
  }
  if (!Array.isArray(value)) return "expected a JSON array of tool calls"
  const bad = value.findIndex((v) => v === null || typeof v !== "object" || Array.isArray(v))
  return bad >= 0 ? `tool call ${bad} of the array is not a JSON object` : undefined
}

export const parseMistralToolCalls = (text: string, options?: OutputParseOptions): ParsedOutput => {
  const first = text.indexOf(TOOL_CALLS_TOKEN)
  if (first < 0) return { content: text, toolCalls: [], errors: [] }
  const errors: Array<ToolCallParseError> = []
  const pieces: Array<Piece> = [{ text: text.slice(0, first) }]
  for (let at = first; at < text.length; ) {
    const bodyStart = at + TOOL_CALLS_TOKEN.length
    const next = text.indexOf(TOOL_CALLS_TOKEN, bodyStart)
    const end = next < 0 ? text.length : next
    pieces.push(...parseSegment(text.slice(bodyStart, end), errors))
    at = end
  }
  const found = pieces.flatMap((p) => ("call" in p ? [p.call] : []))
  if (found.length === 0) return { content: text, toolCalls: [], errors }
  const makeId = options?.makeId ?? mistralCallIds()
  return {
    content: pieces
      .flatMap((p) => ("text" in p ? [p.text.trim()] : []))
      .filter((t) => t.length > 0)
      .join("\n"),
    toolCalls: found.map((c, i) => ({ id: c.id ?? makeId(i), name: c.name, arguments: c.arguments })),
    errors
  }
}
