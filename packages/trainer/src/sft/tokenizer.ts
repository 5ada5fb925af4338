/**
 * A tokenizer learned from the demos themselves, with every digit a token of its own.
 *
 * A tiny model that must copy and combine numbers ("37+48" → calculate → "85") learns that far
 * more easily when "37" is always "3","7" than when it is one of hundreds of number tokens, each
 * with its own embedding to learn. The GPT-2 pre-tokenizer keeps a digit run (with an optional
 * leading space) as one word, so BPE would merge digits. Instead of changing the pre-tokenizer
 * (which would make tokenizer.json a non-standard file), we drop every learned merge whose result
 * contains a digit: those merges only ever apply inside digit words (digit runs never share a word
 * with letters or punctuation), so the other merges are exactly what BPE would have learned from
 * a corpus without digits, and the list stays a valid BPE merge list (a merge that builds on a
 * dropped token contains a digit itself). The file remains an ordinary byte-level BPE that any
 * `tokenizers` implementation reads and tokenizes the same way.
 */
import type { ChatTemplate, TokenizerSpec } from "@reins/policy/text"
import { DEFAULT_SPECIAL_TOKENS, Tokenizer, trainBpe } from "@reins/policy/text"
import type { Demo } from "./demos.js"

export interface DemoTokenizerOptions {
  /** Total vocabulary size including the 256 bytes and the special tokens (an upper bound). */
  readonly vocabSize: number
  /** A pair must occur at least this often to be merged (default 2). */
  readonly minFrequency?: number
}

const DIGIT = /[0-9]/

/** The text a BPE is learned from: every demo rendered by the template, one after another. */
export const demoCorpus = (demos: ReadonlyArray<Demo>, template: ChatTemplate): string =>
  demos.map((d) => template.render(d.messages, { tools: d.tools })).join("")

/** Byte-level BPE whose merges never produce a token containing an ASCII digit. */
export const trainBpeSingleDigits = (corpus: string, options: DemoTokenizerOptions): Tokenizer => {
  const specials = DEFAULT_SPECIAL_TOKENS
  const wanted = options.vocabSize - 256 - specials.length
  // Digit merges are dropped afterwards, so learn more than needed; grow until enough survive
  // or the corpus runs out of frequent pairs.
  for (let extra = 256; ; extra *= 4) {
    const full = trainBpe(corpus, { vocabSize: options.vocabSize + extra, minFrequency: options.minFrequency ?? 2 })
    const learned = full.vocabSize - 256 - specials.length
    const kept = withoutDigitMerges(full, wanted)
    const exhausted = learned < wanted + extra
    if (kept.vocabSize - 256 - specials.length >= wanted || exhausted) return kept
  }
}

/** Rebuilds a trained tokenizer from its first `maxTokens` digit-free merges. */
const withoutDigitMerges = (trained: Tokenizer, maxTokens: number): Tokenizer => {
  const json = trained.toJSON() as { model: { vocab: Record<string, number>; merges: Array<[string, string]> } }
  const byId = Object.entries(json.model.vocab).sort((a, b) => a[1] - b[1])
  const vocab: Array<readonly [string, number]> = byId.slice(0, 256).map(([s, id]) => [s, id] as const)
  const known = new Set(vocab.map(([s]) => s))
  const merges: Array<readonly [string, string]> = []
  for (const [a, b] of json.model.merges) {
    const merged = a + b
    if (DIGIT.test(merged)) continue
    // Two merges can spell the same token; it has one id (as in trainBpe).
    if (!known.has(merged)) {
      if (vocab.length - 256 >= maxTokens) break
      known.add(merged)
      vocab.push([merged, vocab.length])
    }
    merges.push([a, b])
  }
  const addedTokens = trained.addedTokens.map((t, i) => ({ ...t, id: vocab.length + i }))
  const spec: TokenizerSpec = { vocab, merges, addedTokens, ignoreMerges: false }
  return Tokenizer.fromSpec(spec)
}

/** A tokenizer for `demos` rendered with `template`: digits stay single tokens. */
export const trainDemoTokenizer = (demos: ReadonlyArray<Demo>, template: ChatTemplate, options: DemoTokenizerOptions): Tokenizer =>
  trainBpeSingleDigits(demoCorpus(demos, template), options)
