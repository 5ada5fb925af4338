/**
 * The text each token id stands for, for the token view. Only an engine backend has the policy's
 * tokenizer; behind an upstream server the view shows ids alone. A token that is part of a
 * multi-byte character decodes as U+FFFD on its own; an id outside the vocabulary shows as
 * `⟨id⟩` rather than failing the whole view.
 */
import type { Backend } from "../calls/env.js"

export type TokenText = (id: number) => string

export const tokenTextOf = (backend: Backend): TokenText | null => {
  if (backend._tag !== "Engine") return null
  const tokenizer = backend.format.tokenizer
  const cache = new Map<number, string>()
  return (id) => {
    let text = cache.get(id)
    if (text === undefined) {
      try {
        text = tokenizer.decode([id])
      } catch {
        text = `⟨${id}⟩`
      }
      cache.set(id, text)
    }
    return text
  }
}
