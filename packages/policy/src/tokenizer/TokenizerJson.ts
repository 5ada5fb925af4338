/**
 * Reading and writing the Hugging Face `tokenizer.json` format, restricted to the variant reins
 * implements: a byte-level BPE (`model.type: "BPE"`, `ByteLevel` pre-tokenizer with the GPT-2
 * pattern, `ByteLevel` decoder, no normalizer) plus `added_tokens` for control tokens.
 *
 * Anything outside that variant is rejected with a message naming the field, rather than loaded
 * and silently tokenized differently from the library that wrote the file.
 */
import { Either, ParseResult, Schema } from "effect"
import { TokenizerError } from "./TokenizerError.js"

/** A token matched verbatim in text before BPE (`<|im_end|>`); HF calls these added tokens. */
export interface AddedToken {
  readonly id: number
  readonly content: string
  /** HF's flag: `skip_special_tokens` drops special tokens; non-special added tokens stay. */
  readonly special: boolean
}

/** What a byte-level BPE tokenizer is made of, independent of the file format. */
export interface TokenizerSpec {
  /** Byte-level vocabulary strings (see ByteLevel.ts) and their ids. */
  readonly vocab: ReadonlyArray<readonly [string, number]>
  /** Merges in rank order: the first is applied first. */
  readonly merges: ReadonlyArray<readonly [string, string]>
  readonly addedTokens: ReadonlyArray<AddedToken>
  /** HF `ignore_merges`: a word that is itself in the vocabulary becomes that token directly. */
  readonly ignoreMerges: boolean
}

const Id = Schema.Int.pipe(Schema.nonNegative())
const OptBool = Schema.optional(Schema.NullOr(Schema.Boolean))

const AddedTokenJson = Schema.Struct({
  id: Id,
  content: Schema.NonEmptyString,
  special: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  single_word: OptBool,
  lstrip: OptBool,
  rstrip: OptBool,
  normalized: OptBool
})

const ByteLevelJson = Schema.Struct({
  type: Schema.Literal("ByteLevel"),
  add_prefix_space: OptBool,
  trim_offsets: OptBool,
  use_regex: OptBool
})

const BpeModelJson = Schema.Struct({
  type: Schema.Literal("BPE"),
  vocab: Schema.Record({ key: Schema.String, value: Id }),
  merges: Schema.Array(Schema.Union(Schema.String, Schema.Tuple(Schema.String, Schema.String))),
  dropout: Schema.optional(Schema.NullOr(Schema.Number)),
  unk_token: Schema.optional(Schema.NullOr(Schema.String)),
  continuing_subword_prefix: Schema.optional(Schema.NullOr(Schema.String)),
  end_of_word_suffix: Schema.optional(Schema.NullOr(Schema.String)),
  fuse_unk: OptBool,
  byte_fallback: OptBool,
  ignore_merges: OptBool
})

const TokenizerJsonSchema = Schema.Struct({
  version: Schema.optional(Schema.String),
  truncation: Schema.optional(Schema.Unknown),
  padding: Schema.optional(Schema.Unknown),
  added_tokens: Schema.optionalWith(Schema.Array(AddedTokenJson), { default: () => [] }),
  normalizer: Schema.optional(Schema.Unknown),
  pre_tokenizer: ByteLevelJson,
  post_processor: Schema.optional(Schema.NullOr(ByteLevelJson)),
  decoder: ByteLevelJson,
  model: BpeModelJson
})

const fail = (message: string): never => {
  throw new TokenizerError({ message: `tokenizer.json: ${message}` })
}

/** Checks the options that would change how text is split or decoded, which we do not do. */
const checkSupported = (json: typeof TokenizerJsonSchema.Type): void => {
  const { model, pre_tokenizer: pre } = json
  if (json.normalizer != null) fail(`normalizer ${JSON.stringify(json.normalizer)} is not supported (reins tokenizers are byte-level BPE without normalization)`)
  if (pre.add_prefix_space) fail("pre_tokenizer.add_prefix_space = true is not supported (it breaks decode(encode(s)) === s)")
  if (pre.use_regex === false) fail("pre_tokenizer.use_regex = false is not supported (reins splits words with the GPT-2 pattern)")
  if (model.dropout != null && model.dropout !== 0) fail("model.dropout is not supported (encoding must be deterministic)")
  if (model.continuing_subword_prefix) fail("model.continuing_subword_prefix is not supported by a byte-level BPE")
  if (model.end_of_word_suffix) fail("model.end_of_word_suffix is not supported by a byte-level BPE")
  if (model.byte_fallback) fail("model.byte_fallback is not supported (byte-level BPE needs no fallback)")
  for (const t of json.added_tokens) {
    if (t.lstrip || t.rstrip || t.single_word) {
      fail(`added token ${JSON.stringify(t.content)}: lstrip/rstrip/single_word are not supported (they change the text)`)
    }
  }
}

/** Parses a `tokenizer.json` value (already JSON-parsed). Throws `TokenizerError`. */
export const specFromJson = (json: unknown): TokenizerSpec => {
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    fail(`expected a JSON object, got ${json === null ? "null" : Array.isArray(json) ? "an array" : typeof json}`)
  }
  const decoded = Schema.decodeUnknownEither(TokenizerJsonSchema)(json, { errors: "first" })
  if (Either.isLeft(decoded)) {
    // "model.type: Expected "BPE", actual "WordPiece"" reads better than the whole schema tree.
    const issues = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
    const where = (path: ReadonlyArray<PropertyKey>) => (path.length > 0 ? `${path.map(String).join(".")}: ` : "")
    fail(`not a byte-level BPE tokenizer file: ${issues.map((i) => where(i.path) + i.message).join("; ")}`)
  }
  const file = (decoded as Either.Right<never, typeof TokenizerJsonSchema.Type>).right
  checkSupported(file)
  return {
    vocab: Object.entries(file.model.vocab),
    merges: file.model.merges.map((m, i) => {
      if (typeof m !== "string") return m
      const parts = m.split(" ")
      return parts.length === 2 ? ([parts[0]!, parts[1]!] as const) : fail(`model.merges[${i}] ${JSON.stringify(m)} is not "left right"`)
    }),
    addedTokens: file.added_tokens.map((t) => ({ id: t.id, content: t.content, special: t.special })),
    ignoreMerges: file.model.ignore_merges ?? false
  }
}

const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true } as const

/** The `tokenizer.json` object for a spec, in the layout the `tokenizers` library writes. */
export const specToJson = (spec: TokenizerSpec): object => ({
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: spec.addedTokens.map((t) => ({
    id: t.id,
    content: t.content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: t.special
  })),
  normalizer: null,
  pre_tokenizer: byteLevel,
  post_processor: byteLevel,
  decoder: byteLevel,
  model: {
    type: "BPE",
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: spec.ignoreMerges,
    vocab: Object.fromEntries([...spec.vocab].sort((a, b) => a[1] - b[1])),
    merges: spec.merges.map(([l, r]) => [l, r])
  }
})
