/**
 * Shared inputs of the tokenizer and chat tests: a seeded PRNG, a generated English-like corpus
 * (so no test depends on files outside the repo), and a generator of nasty Unicode strings.
 */
import { Rng, trainBpe, type Tokenizer } from "@reins/policy"

/** A seeded stream of uniform numbers in [0, 1) for test inputs (the policy's own PRNG). */
export const rng = (seed: number) => {
  const r = new Rng(seed)
  return () => r.uniform()
}

const WORDS = (
  "the agent calls a tool and reads the result then it answers the user with a short reply " +
  "reinforcement learning trains the policy model on rollouts from the harness gateway tokens " +
  "weather in paris is sunny today tomorrow rain expected city temperature degrees celsius"
).split(" ")

/** ~`chars` characters of sentences over a small vocabulary, with documents separated by <|endoftext|>. */
export const makeCorpus = (seed: number, chars: number): string => {
  const next = rng(seed)
  const parts: Array<string> = []
  let n = 0
  while (n < chars) {
    const len = 4 + Math.floor(next() * 10)
    const words = Array.from({ length: len }, () => WORDS[Math.floor(next() * WORDS.length)]!)
    const sentence = words.join(" ") + (next() < 0.2 ? ".\n" : next() < 0.1 ? "<|endoftext|>" : ". ")
    parts.push(sentence)
    n += sentence.length
  }
  return parts.join("")
}

let shared: Tokenizer | undefined
/** One trained tokenizer (vocab 512) reused by tests that only need "a" tokenizer. */
export const sharedTokenizer = (): Tokenizer => (shared ??= trainBpe(makeCorpus(1, 150_000), { vocabSize: 512 }))

/** Code point pools the random strings draw from: each is a class of trouble. */
const POOLS: ReadonlyArray<ReadonlyArray<string>> = [
  [..."abcdefghijklmnopqrstuvwxyzABCXYZ"],
  [..."0123456789"],
  [..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"],
  [" ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\v", "\f"],
  ["\u0000", "\u0001", "\u001b", "\u007f", "\u0085", "\u009f", "\u200b", "\u200d", "\ufeff"],
  ["\u0301", "\u0308", "\u0327", "\u20dd", "e\u0301", "\u1100\u1161\u11a8"],
  ["😀", "👍🏽", "👨‍👩‍👧", "𝕏", "𠜎", "🏳️‍🌈", "\u{10ffff}", "\u{e0001}"],
  ["é", "ß", "Ω", "ж", "中文", "日本語", "한국어", "עברית", "العربية", "हिन्दी"],
  ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<|im_", "|>", "<|", "<tool_call", "\ufdd0", "\ue000"],
  ["'s", "'ll", "'re", " the", " agent", "weather", " reinforcement"]
]

/** A random well-formed string of up to `maxParts` pieces. */
export const randomText = (next: () => number, maxParts = 40): string => {
  const n = Math.floor(next() * maxParts)
  let s = ""
  for (let i = 0; i < n; i++) {
    const pool = POOLS[Math.floor(next() * POOLS.length)]!
    s += pool[Math.floor(next() * pool.length)]!
  }
  return s
}

/** True when `s` has a lone surrogate (is not well-formed UTF-16). */
export const hasLoneSurrogate = (s: string): boolean => /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s)
