/**
 * The byte-level BPE tokenizer: round-trips (seeded property test over nasty Unicode), merges
 * learned from a corpus and applied, control tokens only where allowed, agreement with the
 * reference `@huggingface/tokenizers` on our tokenizer.json, file errors, streaming decode.
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { describe, expect, it } from "@effect/vitest"
import { loadTokenizer, saveTokenizer, StreamDecoder, Tokenizer, TokenizerError, trainBpe } from "@reins/policy"
import { Effect, Exit } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { hasLoneSurrogate, makeCorpus, randomText, rng, sharedTokenizer } from "./tok-fixtures.js"

const tmp = mkdtempSync(join(tmpdir(), "reins-tok-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

/** The error a thunk throws (fails the test when it does not throw). */
const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (e) {
    return e
  }
  throw new Error("expected an error")
}

const expectTokenizerError = (f: () => unknown, message: RegExp) => {
  const e = thrown(f)
  expect(e).toBeInstanceOf(TokenizerError)
  expect((e as TokenizerError)._tag).toBe("TokenizerError")
  expect((e as TokenizerError).message).toMatch(message)
}

describe("round trip", () => {
  const tok = sharedTokenizer()

  it("decode(encode(s)) === s for 3,000 random strings, with and without control tokens", () => {
    const next = rng(42)
    for (let i = 0; i < 3000; i++) {
      const s = randomText(next)
      expect(hasLoneSurrogate(s)).toBe(false)
      expect(tok.decode(tok.encode(s))).toBe(s)
      expect(tok.decode(tok.encode(s, { allowSpecial: true }))).toBe(s)
    }
  })

  it("round-trips the empty string, a leading BOM, long runs and every BMP character", () => {
    expect(tok.encode("")).toEqual(new Int32Array(0))
    expect(tok.decode([])).toBe("")
    for (const s of ["\ufeffhello", "\ufeff", " ".repeat(20_000), "a".repeat(50_000), "😀".repeat(5_000), "\r\n".repeat(3_000)]) {
      expect(tok.decode(tok.encode(s))).toBe(s)
    }
    let bmp = ""
    for (let c = 0; c < 0x10000; c++) if (c < 0xd800 || c > 0xdfff) bmp += String.fromCharCode(c)
    expect(tok.decode(tok.encode(bmp))).toBe(bmp)
  })

  it("encodes a lone surrogate as U+FFFD, as TextEncoder does", () => {
    expect(tok.decode(tok.encode("a\ud800b"))).toBe("a\ufffdb")
  })
})

describe("training", () => {
  it("learns frequent words as single tokens and applies the merges when encoding", () => {
    const corpus = makeCorpus(7, 60_000)
    const tok = trainBpe(corpus, { vocabSize: 400 })
    expect(tok.vocabSize).toBe(400)
    for (const word of [" reinforcement", " weather", " the"]) {
      const ids = tok.encode(word)
      expect(ids.length).toBe(1)
      expect(tok.decode(ids)).toBe(word)
    }
    // A word the corpus never saw falls back to smaller pieces but still round-trips.
    const unseen = tok.encode(" zyzzyva")
    expect(unseen.length).toBeGreaterThan(1)
    expect(tok.decode(unseen)).toBe(" zyzzyva")
    // Merges really shorten text: ~10 bytes per word here, far fewer tokens.
    const sample = corpus.slice(0, 5_000)
    expect(tok.encode(sample).length).toBeLessThan(new TextEncoder().encode(sample).length / 3)
  })

  it("puts the most frequent pair first and numbers tokens bytes, merges, then control tokens", () => {
    const tok = trainBpe("ab ab ab ab xy xy", { vocabSize: 300, specialTokens: ["<|im_end|>"] })
    const json = tok.toJSON() as { model: { merges: Array<[string, string]>; vocab: Record<string, number> }; added_tokens: Array<{ id: number; content: string }> }
    // " ab" occurs 3 times (plus "ab" once): the pair ("a","b") has count 4, more than any other.
    expect(json.model.merges[0]).toEqual(["a", "b"])
    expect(json.model.vocab["a"]).toBe(0x61) // byte tokens: id = byte value
    expect(json.model.vocab["ab"]).toBe(256) // first learned token
    expect(json.added_tokens).toEqual([expect.objectContaining({ content: "<|im_end|>", id: tok.vocabSize - 1 })])
    // Training stops when no pair repeats: the vocabulary bound is an upper bound.
    expect(tok.vocabSize).toBeLessThan(300)
  })

  it("is deterministic", () => {
    const corpus = makeCorpus(3, 20_000)
    expect(JSON.stringify(trainBpe(corpus, { vocabSize: 350 }).toJSON())).toBe(JSON.stringify(trainBpe(corpus, { vocabSize: 350 }).toJSON()))
  })

  it("never learns control-token text from the corpus", () => {
    const tok = trainBpe("hello<|endoftext|>".repeat(500), { vocabSize: 320 })
    const vocab = (tok.toJSON() as { model: { vocab: Record<string, number> } }).model.vocab
    for (const [piece, id] of Object.entries(vocab)) {
      expect(tok.decode([id]).includes("endoftext"), piece).toBe(false)
    }
  })

  it("rejects a vocabulary smaller than the bytes plus control tokens", () => {
    expectTokenizerError(() => trainBpe("abc", { vocabSize: 260 }), /at least|between 256 \+ 5/)
    expectTokenizerError(() => trainBpe("abc", { vocabSize: 300.5 }), /not an integer/)
  })
})

describe("control tokens", () => {
  const tok = sharedTokenizer()
  const id = (t: string) => tok.tokenId(t)!

  it("gives every control token an id; <|im_end|> is the EOS", () => {
    for (const t of CONTROL) expect(tok.tokenId(t)).toBeTypeOf("number")
    expect(new Set(CONTROL.map(id)).size).toBe(CONTROL.length)
    expect(tok.eosId).toBe(id("<|im_end|>"))
    expect(tok.stopIds).toEqual([id("<|im_end|>"), id("<|endoftext|>")])
    expect(tok.tokenId("hello")).toBeUndefined()
  })

  it("matches control-token text only with allowSpecial", () => {
    const text = "<|im_start|>user\nsay <tool_call> please<|im_end|>"
    const allowed = [...tok.encode(text, { allowSpecial: true })]
    expect(allowed[0]).toBe(id("<|im_start|>"))
    expect(allowed.at(-1)).toBe(id("<|im_end|>"))
    expect(allowed).toContain(id("<tool_call>"))
    const plain = [...tok.encode(text)]
    for (const t of CONTROL) expect(plain).not.toContain(id(t))
    expect(tok.decode(plain)).toBe(text)
  })

  it("splits text at control tokens before BPE, so encodings concatenate there", () => {
    const a = "hello there"
    const b = " world"
    const joined = [...tok.encode(`${a}<|im_end|>${b}`, { allowSpecial: true })]
    expect(joined).toEqual([...tok.encode(a), id("<|im_end|>"), ...tok.encode(b)])
  })

  it("decodes control ids as their text and rejects unknown ids", () => {
    expect(tok.decode([id("<|im_start|>"), ...tok.encode("x"), id("<|im_end|>")])).toBe("<|im_start|>x<|im_end|>")
    expectTokenizerError(() => tok.decode([tok.vocabSize]), /not in the vocabulary/)
    expectTokenizerError(() => tok.decode([-1]), /not in the vocabulary/)
  })
})

describe("tokenizer.json", () => {
  const tok = sharedTokenizer()
  const json = () => JSON.parse(JSON.stringify(tok.toJSON()))

  it("follows the Hugging Face schema and round-trips through JSON", () => {
    const file = json()
    expect(file.model.type).toBe("BPE")
    expect(file.pre_tokenizer.type).toBe("ByteLevel")
    expect(file.decoder.type).toBe("ByteLevel")
    expect(Array.isArray(file.model.merges[0])).toBe(true)
    expect(file.added_tokens.map((t: { content: string }) => t.content)).toEqual(CONTROL)
    const again = Tokenizer.fromJSON(file)
    expect(again.toJSON()).toEqual(tok.toJSON())
    const s = "The agent's reply: 42 degrees<|im_end|>"
    expect(again.encode(s, { allowSpecial: true })).toEqual(tok.encode(s, { allowSpecial: true }))
  })

  it("gives the same ids as @huggingface/tokenizers on 500 random strings", () => {
    // The reference library always matches added tokens, i.e. our allowSpecial: true.
    const hf = new HfTokenizer(json(), {})
    const next = rng(7)
    for (let i = 0; i < 500; i++) {
      const s = randomText(next) + " the weather in paris"
      const ours = [...tok.encode(s, { allowSpecial: true })]
      expect(hf.encode(s).ids).toEqual(ours)
      expect(hf.decode(ours, { clean_up_tokenization_spaces: false })).toBe(s)
    }
  })

  it("accepts the legacy \"left right\" merge strings", () => {
    const file = json()
    file.model.merges = file.model.merges.map(([l, r]: [string, string]) => `${l} ${r}`)
    expect(Tokenizer.fromJSON(file).encode("the weather")).toEqual(tok.encode("the weather"))
  })

  it("rejects files it would tokenize differently, naming the problem", () => {
    const cases: Array<[string, (f: any) => unknown, RegExp]> = [
      ["not an object", () => 42, /expected a JSON object, got number/],
      ["WordPiece", (f) => ((f.model.type = "WordPiece"), f), /model\b[\s\S]*type[\s\S]*BPE/],
      ["normalizer", (f) => ((f.normalizer = { type: "NFKC" }), f), /normalizer\.type "NFKC"/],
      ["prefix space", (f) => ((f.pre_tokenizer.add_prefix_space = true), f), /add_prefix_space/],
      ["missing byte", (f) => (delete f.model.vocab["Ā"], f), /lacks byte 0x00/],
      ["unknown merge part", (f) => (f.model.merges.push(["nope", "x"]), f), /merges\[\d+\] uses "nope"/],
      ["no EOS", (f) => ((f.added_tokens = f.added_tokens.filter((t: any) => !t.content.includes("end"))), f), /end-of-turn/],
      ["lstrip", (f) => ((f.added_tokens[0].lstrip = true), f), /lstrip/],
      ["duplicate id", (f) => ((f.added_tokens[1].id = f.added_tokens[0].id), f), /defined twice/],
      ["bad vocab string", (f) => ((f.model.vocab["hello world"] = 9999), f), /not a byte-level string/]
    ]
    for (const [name, edit, message] of cases) {
      const e = thrown(() => Tokenizer.fromJSON(edit(json())))
      expect(e, name).toBeInstanceOf(TokenizerError)
      expect((e as Error).message, name).toMatch(message)
    }
  })

  it.effect("saves and loads a model directory; a corrupt file fails with a tagged error naming it", () =>
    Effect.gen(function* () {
      const dir = join(tmp, "model")
      yield* saveTokenizer(dir, tok)
      const loaded = yield* loadTokenizer(dir)
      expect(loaded.toJSON()).toEqual(tok.toJSON())

      const text = readFileSync(join(dir, "tokenizer.json"), "utf8")
      writeFileSync(join(dir, "tokenizer.json"), text.slice(0, text.length / 2))
      const truncated = yield* Effect.exit(loadTokenizer(dir))
      expect(Exit.isFailure(truncated)).toBe(true)
      const error = yield* Effect.flip(loadTokenizer(dir))
      expect(error._tag).toBe("TokenizerError")
      expect(error.message).toContain(join(dir, "tokenizer.json"))
      expect(error.message).toMatch(/invalid JSON/)

      const missing = yield* Effect.flip(loadTokenizer(join(tmp, "nowhere")))
      expect(missing.message).toMatch(/cannot read .*nowhere.*tokenizer\.json/)
    })
  )
})

describe("StreamDecoder", () => {
  const tok = sharedTokenizer()

  it("never emits a broken character; the deltas add up to decode()", () => {
    const next = rng(99)
    for (let i = 0; i < 500; i++) {
      const s = randomText(next)
      const ids = tok.encode(s, { allowSpecial: next() < 0.5 })
      const stream = new StreamDecoder(tok)
      let text = ""
      for (const id of ids) {
        const delta = stream.push(id)
        expect(hasLoneSurrogate(delta)).toBe(false)
        expect(delta.includes("\ufffd")).toBe(false)
        text += delta
      }
      text += stream.flush()
      expect(text).toBe(s)
      expect(stream.length).toBe(ids.length)
    }
  })

  it("holds back the bytes of a character until its last byte arrives", () => {
    const bytes = [...tok.encode("😀")] // no merges for it: four byte tokens
    expect(bytes.length).toBe(4)
    const stream = new StreamDecoder(tok)
    expect(bytes.map((id) => stream.push(id))).toEqual(["", "", "", "😀"])
  })

  it("renders a cut-off character as U+FFFD on flush or before a control token, like decode", () => {
    const bytes = [...tok.encode("é😀")]
    const cut = bytes.slice(0, -1)
    const stream = new StreamDecoder(tok)
    expect(stream.push(cut) + stream.flush()).toBe(tok.decode(cut))
    const withEos = [...cut, tok.eosId]
    expect(new StreamDecoder(tok).push(withEos)).toBe(tok.decode(withEos))
    expect(tok.decode(withEos)).toBe("é\ufffd<|im_end|>")
  })
})
