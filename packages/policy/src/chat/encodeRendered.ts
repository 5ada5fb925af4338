/**
 * An escaped rendering (see MarkerEscape.ts) → ids. Every marker left in the text is one the
 * template wrote (or, for a template that only escapes special tokens, a non-special added token
 * such as Qwen's `<think>`, which the tokenizer library matches in any text too): it becomes its
 * id, and the text between markers is unescaped and encoded as plain text, so escaped control
 * tokens from messages come out as the bytes they are made of.
 */
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import type { MarkerEscaper } from "./MarkerEscape.js"

/** A regex matching any of `markers`, longest first; undefined for none. */
export const markerPattern = (markers: ReadonlyArray<string>): RegExp | undefined => {
  if (markers.length === 0) return undefined
  const sorted = [...markers].sort((a, b) => b.length - a.length)
  return new RegExp(sorted.map((m) => m.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "g")
}

export const encodeRendered = (tokenizer: Tokenizer, text: string, pattern: RegExp | undefined, escaper: MarkerEscaper): Int32Array => {
  if (pattern === undefined) return tokenizer.encode(escaper.unescape(text))
  const parts: Array<Int32Array> = []
  let last = 0
  for (const m of text.matchAll(pattern)) {
    parts.push(tokenizer.encode(escaper.unescape(text.slice(last, m.index)), { continues: last > 0 }))
    parts.push(Int32Array.of(tokenizer.tokenId(m[0])!))
    last = m.index + m[0].length
  }
  parts.push(tokenizer.encode(escaper.unescape(text.slice(last)), { continues: last > 0 }))
  return concatIds(parts)
}

export const concatIds = (parts: ReadonlyArray<ArrayLike<number>>): Int32Array => {
  let n = 0
  for (const p of parts) n += p.length
  const out = new Int32Array(n)
  n = 0
  for (const p of parts) {
    for (let i = 0; i < p.length; i++) out[n + i] = p[i]!
    n += p.length
  }
  return out
}
