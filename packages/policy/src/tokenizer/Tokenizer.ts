/**
 * A BPE tokenizer that reads and writes Hugging Face `tokenizer.json`: byte-level files (reins's
 * own, GPT-2/SmolLM2-style, and the Qwen2/Qwen3 and Llama 3 files with Split regex
 * pre-tokenizers, NFC, `ignore_merges`, added tokens; see TokenizerPipeline.ts for what is
 * refused) and SentencePiece-style files with byte fallback (Llama 2, Mistral 7B; Metaspace.ts).
 *
 * Why our own encoder rather than `@huggingface/tokenizers` (0.2.0, which loads the same files and
 * gives the same ids — test/policy/tokenizer.test.ts checks that on random text for ours, and
 * tokenizer-hf.test.ts on a varied corpus for the real Qwen3 and Llama 3 files):
 * - it always turns added-token text into control ids; there is no way to encode a user's
 *   message that literally contains `<|im_end|>` as plain text, which the chat template needs;
 * - its decode throws on an empty id list and by default "cleans up" spaces (`a .` → `a.`),
 *   so `decode(encode(s)) === s` would not hold without care;
 * - its merge step keys pairs by `JSON.stringify([a, b])` strings; ours keys them by ids in a
 *   hash table and returns `Int32Array`s. On the real Qwen3 and Llama 3 files and a 1.2 MB
 *   varied corpus (`npm run bench -- tokenizer`, same ids for every document): ~4 MB/s cold
 *   and 6–10 MB/s warm for ours versus 0.3–0.6 MB/s for the library, which matters because the
 *   Gateway tokenizes every request.
 *
 * Added tokens and text (the rule the chat template and the Gateway rely on):
 * - `encode(text)` never yields the id of an added token, special (`<|im_end|>`, `<|eot_id|>`)
 *   or not (Qwen's `<tool_call>`, `<think>`): text from a harness that spells one is text. The
 *   ids are exactly what the library gives for the same file with `added_tokens` emptied (the
 *   text is normalized, split and merged whole). The library itself would match even the
 *   non-special ones in any text, so that a user's literal `<tool_call>` could forge a call.
 * - `encode(text, { allowSpecial: true })` is exactly the library's `encode(text,
 *   add_special_tokens=False)`: every added token is matched in the raw text first (longest
 *   first) and the pieces between are encoded on their own. Only for text whose markers the
 *   caller wrote (a rendered template).
 * - Nothing is ever added around the text (no BOS from a post-processor): like
 *   `apply_chat_template`, the template writes its own.
 * Decoding renders a control id as its text, as the library does without skip_special_tokens.
 */
import { bytesToVocabString, byteToChar, charToByte } from "./ByteLevel.js"
import { byteToken, byteTokenValue, metaspaceWord, SPACE, type MetaspaceSpec } from "./Metaspace.js"
import { makeMergeTable, mergeWord, type MergeTable } from "./BpeMerger.js"
import { TokenizerError } from "./TokenizerError.js"
import { specFromJson, specToJson, type AddedToken, type TokenizerSpec } from "./TokenizerJson.js"
import { compilePipeline, GPT2_PIPELINE, type TextPipeline } from "./TokenizerPipeline.js"

export interface EncodeOptions {
  /**
   * When true, the text of an added token (`<|im_start|>`, `<|im_end|>`, ...) becomes its id.
   * When false (the default), it is encoded as ordinary text, so text from a user can never
   * forge a turn boundary or a tool call. Use true only for text whose markers you wrote.
   */
  readonly allowSpecial?: boolean
  /**
   * The text continues a longer text encoded in pieces (the text between a rendered template's
   * markers): a SentencePiece-style file whose "▁" prefix goes only at the start of the text
   * (Metaspace `prepend_scheme: "first"`) adds none. Byte-level files ignore it.
   */
  readonly continues?: boolean
}

/** The end-of-turn tokens (ChatML, Llama 3, Llama 2 / Mistral), in order of preference for `eosId`. */
const EOS_CANDIDATES = ["<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>"] as const
/** Every token a model of these families ends a turn or a document with (Llama 3.1 adds `<|eom_id|>`). */
const STOP_TOKENS = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>"] as const

const WORD_CACHE_LIMIT = 50_000
const WORD_CACHE_MAX_LENGTH = 256

const fail = (message: string): never => {
  throw new TokenizerError({ message })
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

export class Tokenizer {
  /** One more than the largest id: the size of the model's embedding table. */
  readonly vocabSize: number
  /** The token that ends a turn: the first present of `<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, `<|end_of_text|>`, `</s>`. */
  readonly eosId: number
  /** Ids at which generation stops by default: every end-of-turn or end-of-text token present. */
  readonly stopIds: ReadonlyArray<number>
  readonly addedTokens: ReadonlyArray<AddedToken>

  private readonly spec: TokenizerSpec
  /**
   * The bytes of every vocabulary token back to back (one allocation, not 150k): token `id` is
   * `tokenData[tokenStart[id] ..][.. tokenLength[id]]`; the length is -1 (or the index past the
   * end) for ids that are not vocabulary entries.
   */
  private readonly tokenData: Uint8Array
  private readonly tokenStart: Int32Array
  private readonly tokenLength: Int32Array
  private readonly idAdded: Map<number, string>
  private readonly addedIds: Map<string, number>
  private readonly addedPattern: RegExp | undefined
  private readonly byteIds: Int32Array
  private readonly merges: MergeTable
  private readonly vocabIds: Map<string, number>
  /** How text becomes words: a byte-level pipeline, or the "▁" rules of a byte-fallback file. */
  private readonly text: TextPipeline | undefined
  private readonly metaspace: MetaspaceSpec | undefined
  private readonly wordCache = new Map<string, Int32Array>()

  private constructor(spec: TokenizerSpec) {
    this.spec = spec
    const pipeline = spec.pipeline ?? GPT2_PIPELINE
    this.metaspace = pipeline.type === "metaspace" ? pipeline : undefined
    this.text = pipeline.type === "metaspace" ? undefined : compilePipeline(pipeline)
    // Plain loops: these run over 150k entries for the real vocabularies.
    // A byte-level string has one character per byte; a SentencePiece-style one is converted first.
    const converted = this.metaspace ? spec.vocab.map(([s]) => metaspaceBytes(s)) : undefined
    let maxId = -1
    let total = 0
    for (let k = 0; k < spec.vocab.length; k++) {
      const [s, id] = spec.vocab[k]!
      if (id > maxId) maxId = id
      total += converted ? converted[k]!.length : s.length
    }
    this.vocabIds = new Map()
    this.tokenData = new Uint8Array(total)
    this.tokenStart = new Int32Array(maxId + 1)
    this.tokenLength = new Int32Array(maxId + 1).fill(-1)
    let at = 0
    for (let k = 0; k < spec.vocab.length; k++) {
      const [s, id] = spec.vocab[k]!
      this.vocabIds.set(s, id)
      if (this.tokenLength[id]! >= 0) fail(`tokenizer.json: id ${id} is used by two vocab entries`)
      this.tokenStart[id] = at
      if (converted) {
        this.tokenData.set(converted[k]!, at)
        at += converted[k]!.length
      } else {
        for (let i = 0; i < s.length; i++) {
          const code = s.charCodeAt(i)
          const b = code < 512 ? charToByte[code]! : -1
          if (b < 0) fail(`tokenizer.json: vocab entry ${JSON.stringify(s)} is not a byte-level string`)
          this.tokenData[at++] = b
        }
      }
      this.tokenLength[id] = at - this.tokenStart[id]!
    }
    if (this.vocabIds.size !== spec.vocab.length) fail("tokenizer.json: model.vocab has duplicate strings")

    this.idAdded = new Map()
    this.addedIds = new Map()
    for (const t of spec.addedTokens) {
      const clash = this.isVocab(t.id)
      // GPT-2 lists <|endoftext|> both in the vocab and as an added token; that is the same token.
      if (clash && spec.vocab.find(([, id]) => id === t.id)?.[0] !== t.content) {
        fail(`tokenizer.json: added token ${JSON.stringify(t.content)} reuses id ${t.id} of a vocab entry`)
      }
      if (this.idAdded.has(t.id) || this.addedIds.has(t.content)) fail(`tokenizer.json: added token ${JSON.stringify(t.content)} (id ${t.id}) is defined twice`)
      this.idAdded.set(t.id, t.content)
      this.addedIds.set(t.content, t.id)
      maxId = Math.max(maxId, t.id)
    }
    this.vocabSize = maxId + 1
    this.addedTokens = spec.addedTokens

    this.byteIds = new Int32Array(256)
    for (let b = 0; b < 256; b++) {
      const token = this.metaspace ? byteToken(b) : byteToChar[b]!
      this.byteIds[b] =
        this.vocabIds.get(token) ??
        fail(
          `tokenizer.json: the vocabulary lacks byte 0x${b.toString(16).padStart(2, "0")} (${JSON.stringify(token)}); ` +
            (this.metaspace ? "model.byte_fallback needs all 256 byte tokens" : "not a byte-level BPE")
        )
    }

    const n = spec.merges.length
    const left = new Int32Array(n)
    const right = new Int32Array(n)
    const result = new Int32Array(n)
    for (let k = 0; k < n; k++) {
      const [l, r] = spec.merges[k]!
      const lid = this.vocabIds.get(l)
      const rid = this.vocabIds.get(r)
      const mid = this.vocabIds.get(l + r)
      if (lid === undefined || rid === undefined || mid === undefined) {
        const missing = lid === undefined ? l : rid === undefined ? r : l + r
        fail(`tokenizer.json: model.merges[${k}] uses ${JSON.stringify(missing)}, which is not in the vocab`)
      }
      left[k] = lid!
      right[k] = rid!
      result[k] = mid!
    }
    this.merges = makeMergeTable(left, right, result)

    const contents = [...this.addedIds.keys()].sort((a, b) => b.length - a.length)
    this.addedPattern = contents.length > 0 ? new RegExp(contents.map(escapeRegExp).join("|"), "g") : undefined

    const present = (tokens: ReadonlyArray<string>) => tokens.map((t) => this.addedIds.get(t)).filter((id): id is number => id !== undefined)
    this.stopIds = present(STOP_TOKENS)
    this.eosId = present(EOS_CANDIDATES)[0] ?? fail(`tokenizer.json: needs an end-of-turn added token (${EOS_CANDIDATES.join(" or ")})`)
  }

  /** Builds a tokenizer from its parts (what the trainer produces). Throws `TokenizerError`. */
  static fromSpec(spec: TokenizerSpec): Tokenizer {
    return new Tokenizer(spec)
  }

  /** Reads a parsed `tokenizer.json`. Throws `TokenizerError` naming what is wrong. */
  static fromJSON(json: unknown): Tokenizer {
    return new Tokenizer(specFromJson(json))
  }

  /** The `tokenizer.json` object (write it with `JSON.stringify`). */
  toJSON(): object {
    return specToJson(this.spec)
  }

  /** The id of an added token (`<|im_end|>`, `<tool_call>`, ...), or undefined. */
  tokenId(token: string): number | undefined {
    return this.addedIds.get(token)
  }

  /** The added token an id stands for, or undefined for an ordinary (byte) token. */
  addedToken(id: number): string | undefined {
    return this.idAdded.get(id)
  }

  /** The bytes an ordinary token stands for; undefined for added tokens and unused ids. */
  tokenBytes(id: number): Uint8Array | undefined {
    if (!this.isVocab(id)) return undefined
    const start = this.tokenStart[id]!
    return this.tokenData.subarray(start, start + this.tokenLength[id]!)
  }

  /**
   * Text → ids. Lone surrogates (ill-formed UTF-16) are encoded as U+FFFD, as `TextEncoder`
   * does; every well-formed string round-trips through `decode`.
   */
  encode(text: string, options?: EncodeOptions): Int32Array {
    const out = new IdBuffer(text.length)
    if (options?.allowSpecial && this.addedPattern) {
      let last = 0
      for (const m of text.matchAll(this.addedPattern)) {
        this.encodePlain(text.slice(last, m.index), last === 0 && !options.continues, out)
        out.push(this.addedIds.get(m[0])!)
        last = m.index + m[0].length
      }
      this.encodePlain(text.slice(last), last === 0 && !options.continues, out)
    } else {
      this.encodePlain(text, !options?.continues, out)
    }
    return out.result()
  }

  /** True when decoded text drops one leading space (the "▁" a SentencePiece-style prefix added). */
  get stripsLeadingSpace(): boolean {
    return this.metaspace?.stripLeadingSpace ?? false
  }

  /** Ids → text. Control ids become their text. Throws `TokenizerError` on an unknown id. */
  decode(ids: ArrayLike<number>): string {
    const utf8 = new TextDecoder("utf-8", { ignoreBOM: true })
    const { tokenData, tokenStart, tokenLength } = this
    let text = ""
    for (let i = 0; i < ids.length; ) {
      // A run of byte tokens is decoded as one byte string (a character may span tokens); a
      // control token ends the run.
      let j = i
      let n = 0
      while (j < ids.length && this.isVocab(ids[j]!)) n += tokenLength[ids[j++]!]!
      if (j > i) {
        const bytes = new Uint8Array(n)
        let at = 0
        for (; i < j; i++) {
          const id = ids[i]!
          for (let k = tokenStart[id]!, end = k + tokenLength[id]!; k < end; k++) bytes[at++] = tokenData[k]!
        }
        text += utf8.decode(bytes)
        continue
      }
      const id = ids[i++]!
      text += this.idAdded.get(id) ?? this.unknownId(id)
    }
    return this.stripsLeadingSpace && text.startsWith(" ") ? text.slice(1) : text
  }

  /** @internal for StreamDecoder: fails with a clear message for an id we cannot decode. */
  unknownId(id: number): never {
    return fail(`token id ${id} is not in the vocabulary (size ${this.vocabSize})`)
  }

  /** A SentencePiece-style word's starting symbols: each character's id, or its UTF-8 bytes' ids when the vocabulary lacks it. */
  private characterSymbols(word: string): Int32Array {
    const symbols: Array<number> = []
    for (const ch of word) {
      const id = this.vocabIds.get(ch)
      if (id !== undefined) symbols.push(id)
      else for (const b of utf8.encode(ch)) symbols.push(this.byteIds[b]!)
    }
    return Int32Array.from(symbols)
  }

  private isVocab(id: number): boolean {
    // A typed-array read past the end (or at -1, 1.5, NaN) is undefined: not a vocabulary id.
    return (this.tokenLength[id] ?? -1) >= 0
  }

  /** `atStart`: the piece begins the text (a Metaspace `first` prefix goes only there). */
  private encodePlain(text: string, atStart: boolean, out: IdBuffer): void {
    if (text.length === 0) return
    if (this.metaspace) return out.pushAll(this.encodeWord(metaspaceWord(this.metaspace.prefix, text, atStart)))
    const words: Array<string> = []
    const pipeline = this.text!
    pipeline.split(pipeline.normalize(text), words)
    for (const word of words) out.pushAll(this.encodeWord(word))
  }

  private encodeWord(word: string): Int32Array {
    const cached = this.wordCache.get(word)
    if (cached !== undefined) return cached
    let ids: Int32Array
    if (this.metaspace) {
      ids = mergeWord(this.merges, this.characterSymbols(word))
    } else {
      const bytes = utf8.encode(word)
      const whole = this.spec.ignoreMerges ? this.vocabIds.get(bytesToVocabString(bytes)) : undefined
      if (whole !== undefined) {
        ids = Int32Array.of(whole)
      } else {
        const symbols = new Int32Array(bytes.length)
        for (let i = 0; i < bytes.length; i++) symbols[i] = this.byteIds[bytes[i]!]!
        ids = mergeWord(this.merges, symbols)
      }
    }
    // A bounded cache: prompts repeat words constantly, but a long-running Gateway must not grow.
    // Long words are not kept (a SentencePiece-style piece is a whole message).
    if (word.length > WORD_CACHE_MAX_LENGTH) return ids
    if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear()
    this.wordCache.set(word, ids)
    return ids
  }
}

const utf8 = new TextEncoder()

/** The bytes a SentencePiece-style string stands for: `<0xNN>` is byte NN, "▁" a space, the rest UTF-8. */
const metaspaceBytes = (s: string): Uint8Array => {
  const b = byteTokenValue(s)
  return b >= 0 ? Uint8Array.of(b) : utf8.encode(s.replaceAll(SPACE, " "))
}

/** A growable Int32Array. */
class IdBuffer {
  private buf: Int32Array
  private n = 0

  constructor(hint: number) {
    this.buf = new Int32Array(Math.max(16, hint >> 1))
  }

  private reserve(extra: number) {
    if (this.n + extra <= this.buf.length) return
    const grown = new Int32Array(Math.max(this.buf.length * 2, this.n + extra))
    grown.set(this.buf.subarray(0, this.n))
    this.buf = grown
  }

  push(id: number) {
    this.reserve(1)
    this.buf[this.n++] = id
  }

  pushAll(ids: Int32Array) {
    this.reserve(ids.length)
    this.buf.set(ids, this.n)
    this.n += ids.length
  }

  result(): Int32Array {
    return this.buf.slice(0, this.n)
  }
}
