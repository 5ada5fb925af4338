/**
 * Keeps control-token text that comes from message content from turning into control tokens.
 *
 * The rendered prompt is one string, so after rendering nothing tells the template's own
 * `<|im_end|>` from a user's literal `<|im_end|>`. We therefore rewrite every string of the
 * messages and tools before rendering: each occurrence of a marker becomes U+FDD0 followed by a
 * private-use character naming the marker, and a literal U+FDD0 is doubled. U+FDD0 is a Unicode
 * noncharacter, never assigned, so doubling it is rare and costs nothing. The mapping is a
 * bijection, so `unescapeMarkers` restores the exact text, and the escaped strings contain no
 * marker at all: every marker left in the rendering was written by the template.
 */

const ESC = "\uFDD0"
const FIRST_CODE = 0xe000
const LAST_CODE = 0xf8ff

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

export interface MarkerEscaper {
  readonly escape: (text: string) => string
  readonly unescape: (text: string) => string
}

/** Builds the escaper for a set of markers (the tokenizer's added tokens). */
export const markerEscaper = (markers: ReadonlyArray<string>): MarkerEscaper => {
  if (markers.length > LAST_CODE - FIRST_CODE + 1) throw new Error("too many control tokens to escape")
  const index = new Map(markers.map((m, i) => [m, i] as const))
  const sorted = [...markers].sort((a, b) => b.length - a.length)
  const find = new RegExp([ESC, ...sorted.map(escapeRegExp)].join("|"), "g")
  const restore = new RegExp(`${ESC}([${ESC}\\u${FIRST_CODE.toString(16)}-\\u${LAST_CODE.toString(16)}])`, "g")
  return {
    escape: (text) => text.replace(find, (m) => (m === ESC ? ESC + ESC : ESC + String.fromCharCode(FIRST_CODE + index.get(m)!))),
    unescape: (text) => (text.includes(ESC) ? text.replace(restore, (_, c: string) => (c === ESC ? ESC : markers[c.charCodeAt(0) - FIRST_CODE]!)) : text)
  }
}

/** Applies `f` to every string in a JSON-like value, object keys included. */
export const mapStrings = (value: unknown, f: (s: string) => string): unknown => {
  if (typeof value === "string") return f(value)
  if (Array.isArray(value)) return value.map((v) => mapStrings(v, f))
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [f(k), mapStrings(v, f)]))
  }
  return value
}
