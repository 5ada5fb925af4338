/**
 * A byte-level BPE tokenizer that reads and writes Hugging Face `tokenizer.json`.
 *
 * Why our own encoder rather than `@huggingface/tokenizers` (0.2.0, which does load our files and
 * gives the same ids — test/policy/tokenizer.test.ts checks that on random text):
 * - it always turns added-token text into control ids; there is no way to encode a user's
 *   message that literally contains `<|im_end|>` as plain text, which the chat template needs;
 * - its decode throws on an empty id list and by default "cleans up" spaces (`a .` → `a.`),
 *   so `decode(encode(s)) === s` would not hold without care;
 * - its merge step keys pairs by `JSON.stringify([a, b])` strings; ours keys them by ids and
 *   returns `Int32Array`s. Measured here on 300 kB of English text (vocab 4096, same ids):
 *   ~110 ms cold / ~30 ms warm for ours versus ~400 ms / ~330 ms for the library, which
 *   matters because the Gateway tokenizes every request.
 *
 * Control tokens (`added_tokens`) are matched in text only when `encode(text, { allowSpecial:
 * true })` asks for it; by default their text is ordinary bytes. Decoding always renders a
 * control id as its text.
 */
import { byteToChar, splitWords, vocabStringToBytes } from "./ByteLevel.js"
import { makeMergeTable, mergeWord, type MergeTable } from "./BpeMerger.js"
import { TokenizerError } from "./TokenizerError.js"
import { specFromJson, specToJson, type AddedToken, type TokenizerSpec } from "./TokenizerJson.js"

export interface EncodeOptions {
  /**
   * When true, the text of an added token (`<|im_start|>`, `<|im_end|>`, ...) becomes its id.
   * When false (the default), it is encoded as the plain bytes it is made of, so text from a
   * user can never forge a turn boundary. Use true only for text whose markers you wrote.
   */
  readonly allowSpecial?: boolean
}

/** The end-of-turn tokens, in order of preference for `eosId`. */
const EOS_CANDIDATES = ["<|im_end|>", "<|endoftext|>"] as const

const WORD_CACHE_LIMIT = 50_000

const fail = (message: string): never => {
  throw new TokenizerError({ message })
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

export class Tokenizer {
  /** One more than the largest id: the size of the model's embedding table. */
  readonly vocabSize: number
  /** The token that ends a turn: `<|im_end|>`, or `<|endoftext|>` if there is no `<|im_end|>`. */
  readonly eosId: number
  /** Ids at which generation stops: every one of `<|im_end|>` and `<|endoftext|>` present. */
  readonly stopIds: ReadonlyArray<number>
  readonly addedTokens: ReadonlyArray<AddedToken>

  private readonly spec: TokenizerSpec
  private readonly idBytes: Array<Uint8Array | undefined>
  private readonly idAdded: Map<number, string>
  private readonly addedIds: Map<string, number>
  private readonly addedPattern: RegExp | undefined
  private readonly byteIds: Int32Array
  private readonly merges: MergeTable
  private readonly vocabIds: Map<string, number>
  private readonly wordCache = new Map<string, Int32Array>()
  private readonly utf8 = new TextEncoder()

  private constructor(spec: TokenizerSpec) {
    this.spec = spec
    this.vocabIds = new Map(spec.vocab.map(([s, id]) => [s, id] as const))
    if (this.vocabIds.size !== spec.vocab.length) fail("tokenizer.json: model.vocab has duplicate strings")

    let maxId = -1
    this.idBytes = []
    for (const [s, id] of spec.vocab) {
      const bytes = vocabStringToBytes(s) ?? fail(`tokenizer.json: vocab entry ${JSON.stringify(s)} is not a byte-level string`)
      if (this.idBytes[id] !== undefined) fail(`tokenizer.json: id ${id} is used by two vocab entries`)
      this.idBytes[id] = bytes
      maxId = Math.max(maxId, id)
    }

    this.idAdded = new Map()
    this.addedIds = new Map()
    for (const t of spec.addedTokens) {
      const clash = this.idBytes[t.id]
      // GPT-2 lists <|endoftext|> both in the vocab and as an added token; that is the same token.
      if (clash !== undefined && spec.vocab.find(([, id]) => id === t.id)?.[0] !== t.content) {
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
      this.byteIds[b] =
        this.vocabIds.get(byteToChar[b]!) ??
        fail(`tokenizer.json: the vocabulary lacks byte 0x${b.toString(16).padStart(2, "0")} (${JSON.stringify(byteToChar[b])}); not a byte-level BPE`)
    }

    this.merges = makeMergeTable(
      spec.merges.map(([l, r], i) => {
        const id = (s: string) => this.vocabIds.get(s) ?? fail(`tokenizer.json: model.merges[${i}] uses ${JSON.stringify(s)}, which is not in the vocab`)
        return [id(l), id(r), id(l + r)] as const
      }),
      this.vocabSize
    )

    const contents = [...this.addedIds.keys()].sort((a, b) => b.length - a.length)
    this.addedPattern = contents.length > 0 ? new RegExp(contents.map(escapeRegExp).join("|"), "g") : undefined

    const stops = EOS_CANDIDATES.map((t) => this.addedIds.get(t)).filter((id): id is number => id !== undefined)
    this.stopIds = stops
    this.eosId = stops[0] ?? fail(`tokenizer.json: needs an end-of-turn added token (${EOS_CANDIDATES.join(" or ")})`)
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
    return this.idBytes[id]
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
        this.encodePlain(text.slice(last, m.index), out)
        out.push(this.addedIds.get(m[0])!)
        last = m.index + m[0].length
      }
      this.encodePlain(text.slice(last), out)
    } else {
      this.encodePlain(text, out)
    }
    return out.result()
  }

  /** Ids → text. Control ids become their text. Throws `TokenizerError` on an unknown id. */
  decode(ids: ArrayLike<number>): string {
    const utf8 = new TextDecoder("utf-8", { ignoreBOM: true })
    let text = ""
    let run: Array<Uint8Array> = []
    const flush = () => {
      if (run.length > 0) text += utf8.decode(concatBytes(run))
      run = []
    }
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!
      const bytes = this.idBytes[id]
      if (bytes !== undefined) {
        run.push(bytes)
        continue
      }
      const added = this.idAdded.get(id) ?? this.unknownId(id)
      flush()
      text += added
    }
    flush()
    return text
  }

  /** @internal for StreamDecoder: fails with a clear message for an id we cannot decode. */
  unknownId(id: number): never {
    return fail(`token id ${id} is not in the vocabulary (size ${this.vocabSize})`)
  }

  private encodePlain(text: string, out: IdBuffer): void {
    if (text.length === 0) return
    for (const word of splitWords(text)) out.pushAll(this.encodeWord(word))
  }

  private encodeWord(word: string): Int32Array {
    const cached = this.wordCache.get(word)
    if (cached !== undefined) return cached
    const bytes = this.utf8.encode(word)
    let ids: Int32Array
    const whole = this.spec.ignoreMerges ? this.vocabIds.get(bytesToString(bytes)) : undefined
    if (whole !== undefined) {
      ids = Int32Array.of(whole)
    } else {
      const symbols = new Int32Array(bytes.length)
      for (let i = 0; i < bytes.length; i++) symbols[i] = this.byteIds[bytes[i]!]!
      ids = mergeWord(this.merges, symbols)
    }
    // A bounded cache: prompts repeat words constantly, but a long-running Gateway must not grow.
    if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear()
    this.wordCache.set(word, ids)
    return ids
  }
}

const bytesToString = (bytes: Uint8Array): string => {
  let s = ""
  for (const b of bytes) s += byteToChar[b]
  return s
}

const concatBytes = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  if (parts.length === 1) return parts[0]!
  let n = 0
  for (const p of parts) n += p.length
  const out = new Uint8Array(n)
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
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
