/**
 * Turns an assistant's generated text into OpenAI `content` + `tool_calls`.
 *
 * The model calls a tool by writing `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`
 * (see chat_template.jinja). Rules:
 * - `arguments` may be a JSON object (its exact text is kept, as OpenAI passes the model's text
 *   through) or a string holding a JSON object (kept verbatim); missing means `{}`. Any other
 *   value is an error. Keys other than `name` and `arguments` are ignored.
 * - A call that cannot be used (invalid JSON, no name, bad arguments, no closing tag because
 *   the generation was cut off) is reported in `errors` AND left in `content` verbatim, so the
 *   client still sees everything the model wrote and nothing is dropped silently.
 * - `content` is the text outside the successful calls. When there are successful calls, the
 *   whitespace touching them is trimmed and the remaining text pieces are joined with "\n" —
 *   the inverse of how the template lays out content and calls. Without calls the text is
 *   returned unchanged. An empty `content` with calls is what OpenAI sends as `null`.
 * - Ids are `call_` + a random part shared by the response + the call's index: unique per
 *   response (pass `makeId` for deterministic ids).
 */
import { randomBytes } from "node:crypto"
import { endOfJsonContainer, skipSpace } from "./jsonScan.js"
import type { OutputParseOptions, ParsedOutput } from "./ParsedOutput.js"

export const TOOL_CALL_OPEN = "<tool_call>"
export const TOOL_CALL_CLOSE = "</tool_call>"

export interface ParsedToolCall {
  readonly id: string
  readonly name: string
  /** JSON text of an object, as in OpenAI's `function.arguments`. */
  readonly arguments: string
}

export interface ToolCallParseError {
  /** The call's text as generated, from `<tool_call>` to its end. */
  readonly raw: string
  readonly message: string
}

type Item = { readonly text: string } | { readonly call: Omit<ParsedToolCall, "id"> }

export const parseToolCalls = (text: string, options?: OutputParseOptions): ParsedOutput => {
  const items: Array<Item> = []
  const errors: Array<ToolCallParseError> = []
  let at = 0
  for (;;) {
    const open = text.indexOf(TOOL_CALL_OPEN, at)
    if (open < 0) break
    items.push({ text: text.slice(at, open) })
    const bodyStart = open + TOOL_CALL_OPEN.length
    const close = text.indexOf(TOOL_CALL_CLOSE, bodyStart)
    const nextOpen = text.indexOf(TOOL_CALL_OPEN, bodyStart)
    if (close < 0 || (nextOpen >= 0 && nextOpen < close)) {
      const end = nextOpen >= 0 ? nextOpen : text.length
      const raw = text.slice(open, end)
      errors.push({ raw, message: `no closing ${TOOL_CALL_CLOSE} (the generation may have been cut off)` })
      items.push({ text: raw })
      at = end
      continue
    }
    const raw = text.slice(open, close + TOOL_CALL_CLOSE.length)
    const parsed = parseCallBody(text.slice(bodyStart, close))
    if (typeof parsed === "string") {
      errors.push({ raw, message: parsed })
      items.push({ text: raw })
    } else {
      items.push({ call: parsed })
    }
    at = close + TOOL_CALL_CLOSE.length
  }
  items.push({ text: text.slice(at) })

  const makeId = options?.makeId ?? randomCallIds()
  const toolCalls: Array<ParsedToolCall> = []
  for (const item of items) if ("call" in item) toolCalls.push({ id: makeId(toolCalls.length), ...item.call })
  return { content: toolCalls.length === 0 ? text : contentAround(items), toolCalls, errors }
}

/** Ids `call_` + a random part shared by one response + the call's index. */
export const randomCallIds = (): ((index: number) => string) => {
  const prefix = randomBytes(9).toString("base64url")
  return (index: number) => `call_${prefix}${index}`
}

/** Joins the text between calls, trimming whitespace where it touches a call. */
const contentAround = (items: ReadonlyArray<Item>): string => {
  const runs: Array<string> = [""]
  for (const item of items) {
    if ("call" in item) runs.push("")
    else runs[runs.length - 1] += item.text
  }
  return runs
    .map((run, i) => (i === 0 ? run.trimEnd() : i === runs.length - 1 ? run.trimStart() : run.trim()))
    .filter((run) => run.length > 0)
    .join("\n")
}

const kind = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "an array" : `a ${typeof v}`)
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)

/**
 * A call's JSON body → name and arguments, or an error message. The arguments are under the
 * first of `argumentKeys` the object has (Llama 3 writes "parameters", the others "arguments").
 */
export const parseCallBody = (body: string, argumentKeys: ReadonlyArray<string> = ["arguments"]): Omit<ParsedToolCall, "id"> | string => {
  const json = body.trim()
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (e) {
    return `tool call is not valid JSON: ${(e as Error).message}`
  }
  const key = (isObject(value) ? argumentKeys.find((k) => k in value) : undefined) ?? argumentKeys[0]!
  if (!isObject(value)) return `tool call must be a JSON object with "name" and "${key}", got ${kind(value)}`
  const { name } = value
  const args = value[key]
  if (typeof name !== "string" || name.length === 0) return `tool call needs "name" as a non-empty string, got ${kind(name)}`
  if (args === undefined) return { name, arguments: "{}" }
  if (isObject(args)) return { name, arguments: topLevelValueText(json, key) ?? JSON.stringify(args) }
  if (typeof args === "string") {
    let inner: unknown
    try {
      inner = JSON.parse(args)
    } catch {
      inner = undefined
    }
    return isObject(inner) ? { name, arguments: args } : `tool call "${name}": "${key}" is a string but not the JSON text of an object`
  }
  return `tool call "${name}": "${key}" must be a JSON object, got ${kind(args)}`
}

/**
 * The exact text of the value of top-level `key` in a valid JSON object text (the last one if
 * the key repeats, as `JSON.parse` keeps the last).
 */
const topLevelValueText = (json: string, key: string): string | undefined => {
  const ws = (i: number) => skipSpace(json, i)
  const endOfString = (i: number) => {
    let j = i + 1
    while (json[j] !== '"') j += json[j] === "\\" ? 2 : 1
    return j + 1
  }
  const endOfValue = (i: number) => {
    const c = json[i]
    if (c === '"') return endOfString(i)
    // The text is valid JSON, so a container always closes.
    if (c === "{" || c === "[") return endOfJsonContainer(json, i)
    let j = i
    while (j < json.length && !",}] \t\n\r".includes(json[j]!)) j++
    return j
  }

  let found: string | undefined
  let i = ws(0) + 1 // past "{"
  for (;;) {
    i = ws(i)
    if (json[i] !== '"') return found // "}"
    const keyEnd = endOfString(i)
    const k = JSON.parse(json.slice(i, keyEnd)) as string
    const valueStart = ws(ws(keyEnd) + 1) // past ":"
    const valueEnd = endOfValue(valueStart)
    if (k === key) found = json.slice(valueStart, valueEnd)
    i = ws(valueEnd)
    if (json[i] === ",") i++
  }
}
