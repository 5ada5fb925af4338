/**
 * Finding where a JSON object or array ends inside free text (tool calls written without a
 * closing tag: Llama 3's bare JSON, Mistral's `[TOOL_CALLS]`). Only the extent is found here;
 * whether the slice is valid JSON is `JSON.parse`'s decision, so its error message reaches the
 * client unchanged.
 */

const SPACE = " \t\n\r"

export const skipSpace = (text: string, i: number): number => {
  while (i < text.length && SPACE.includes(text[i]!)) i++
  return i
}

/**
 * The index just past the object or array opening at `start` (`text[start]` is `{` or `[`), or
 * -1 when it never closes (the generation was cut off). Brackets inside strings do not count.
 */
export const endOfJsonContainer = (text: string, start: number): number => {
  let depth = 0
  for (let j = start; j < text.length; ) {
    const c = text[j]!
    if (c === '"') {
      j++
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1
      if (j >= text.length) return -1
      j++
      continue
    }
    if (c === "{" || c === "[") depth++
    else if (c === "}" || c === "]") {
      depth--
      if (depth === 0) return j + 1
    }
    j++
  }
  return -1
}
