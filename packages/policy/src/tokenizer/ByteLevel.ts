/**
 * The byte-level half of a GPT-2-style tokenizer, as the Hugging Face `ByteLevel` pre-tokenizer
 * and decoder define it:
 *
 * - Every UTF-8 byte is shown as one printable character (`byteToChar`), so a vocabulary of
 *   strings covers all 256 bytes and any text round-trips without an unknown token. Printable
 *   ASCII and most Latin-1 map to themselves; the rest (control bytes, space, ...) are shifted to
 *   U+0100 and up, which is why a leading space shows up as `Ġ` in vocabularies.
 * - Text is first split into "words" by the GPT-2 pattern, so merges never cross a word
 *   boundary (a letter run with its optional leading space, a digit run, a punctuation run, or
 *   whitespace). The pattern covers every code point, so the words always concatenate back to
 *   the text.
 */

const makeByteToChar = (): ReadonlyArray<string> => {
  const table = new Array<string>(256)
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
  let shifted = 0
  for (let b = 0; b < 256; b++) {
    table[b] = String.fromCharCode(printable(b) ? b : 256 + shifted++)
  }
  return table
}

/** `byteToChar[b]` is the one-character vocabulary string for byte `b`. */
export const byteToChar: ReadonlyArray<string> = makeByteToChar()

/** The inverse of `byteToChar`: char code → byte, or -1 for characters outside the alphabet. */
export const charToByte: Int16Array = (() => {
  const table = new Int16Array(512).fill(-1)
  byteToChar.forEach((c, b) => (table[c.charCodeAt(0)] = b))
  return table
})()

/**
 * The GPT-2 split pattern (the one the `ByteLevel` pre-tokenizer applies when `use_regex` is
 * true). A fresh RegExp per call keeps `lastIndex` state local.
 */
const WORD_PATTERN_SOURCE = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
export const wordPattern = (): RegExp => new RegExp(WORD_PATTERN_SOURCE, "gu")

/** Splits text into pre-tokenizer words. Their concatenation is the input. */
export const splitWords = (text: string): Array<string> => text.match(wordPattern()) ?? []

/** The vocabulary string of a byte sequence (what a BPE token looks like in `tokenizer.json`). */
export const bytesToVocabString = (bytes: Uint8Array): string => {
  let s = ""
  for (const b of bytes) s += byteToChar[b]
  return s
}
