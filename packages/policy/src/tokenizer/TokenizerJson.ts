/**
 * Reading and writing the Hugging Face `tokenizer.json` format, restricted to the variants reins
 * implements (`model.type: "BPE"` with `added_tokens` for control tokens):
 * - a byte-level BPE with the stages of TokenizerPipeline.ts (GPT-2 ByteLevel, or the Split
 *   regexes of Qwen2/Qwen3 and Llama 3; NFC or no normalizer);
 * - a SentencePiece-style BPE with `byte_fallback` and the "▁" stages of Metaspace.ts (Llama 2,
 *   Mistral 7B).
 *
 * Anything outside that variant is rejected with a message naming the field, rather than loaded
 * and silently tokenized differently from the library that wrote the file.
 */
import { Either, ParseResult, Schema } from "effect"
import { metaspaceFromJson, type MetaspaceSpec } from "./Metaspace.js"
import { GPT2_PIPELINE, pipelineFromJson, pipelineToJson, type PipelineSpec } from "./TokenizerPipeline.js"
import { TokenizerError } from "./TokenizerError.js"

/** A token matched verbatim in text before BPE (`<|im_end|>`); HF calls these added tokens. */
export interface AddedToken {
  readonly id: number
  readonly content: string
  /** HF's flag: `skip_special_tokens` drops special tokens; non-special added tokens stay. */
  readonly special: boolean
}

/** What a BPE tokenizer is made of, independent of the file format. */
export interface TokenizerSpec {
  /** Vocabulary strings and their ids: byte-level strings (see ByteLevel.ts), or "▁" strings and `<0xNN>` bytes (Metaspace.ts). */
  readonly vocab: ReadonlyArray<readonly [string, number]>
  /** Merges in rank order: the first is applied first. */
  readonly merges: ReadonlyArray<readonly [string, string]>
  readonly addedTokens: ReadonlyArray<AddedToken>
  /** HF `ignore_merges`: a word that is itself in the vocabulary becomes that token directly. */
  readonly ignoreMerges: boolean
  /** Normalizer, pre-tokenizer, post-processor and decoder; absent means the GPT-2 variant. */
  readonly pipeline?: PipelineSpec | MetaspaceSpec
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

const BpeModelJson = Schema.Struct({
  type: Schema.Literal("BPE"),
  // Checked by readVocab / readMerges: a schema over 150k entries costs seconds per load.
  vocab: Schema.Unknown,
  merges: Schema.Unknown,
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
  // Read by pipelineFromJson, which names the field of anything it does not implement.
  normalizer: Schema.optional(Schema.Unknown),
  pre_tokenizer: Schema.optional(Schema.Unknown),
  post_processor: Schema.optional(Schema.Unknown),
  decoder: Schema.optional(Schema.Unknown),
  model: BpeModelJson
})

const fail = (message: string): never => {
  throw new TokenizerError({ message: `tokenizer.json: ${message}` })
}

const readVocab = (vocab: unknown): Array<readonly [string, number]> => {
  if (vocab === null || typeof vocab !== "object" || Array.isArray(vocab)) return fail("model.vocab must be an object of token → id")
  const entries = Object.entries(vocab)
  for (const [token, id] of entries) {
    if (!Number.isInteger(id) || id < 0) fail(`model.vocab[${JSON.stringify(token)}] is ${JSON.stringify(id)}, not a non-negative integer id`)
  }
  return entries as Array<[string, number]>
}

/** Merges as `[left, right]`, from pairs or the legacy "left right" strings. */
const readMerges = (merges: unknown): Array<readonly [string, string]> => {
  if (!Array.isArray(merges)) return fail("model.merges must be an array")
  const out = new Array<readonly [string, string]>(merges.length)
  for (let i = 0; i < merges.length; i++) {
    const m: unknown = merges[i]
    if (typeof m === "string") {
      const parts = m.split(" ")
      out[i] = parts.length === 2 ? [parts[0]!, parts[1]!] : fail(`model.merges[${i}] ${JSON.stringify(m)} is not "left right"`)
    } else if (Array.isArray(m) && m.length === 2 && typeof m[0] === "string" && typeof m[1] === "string") {
      out[i] = m as [string, string]
    } else {
      fail(`model.merges[${i}] ${JSON.stringify(m)} is not a pair of strings`)
    }
  }
  return out
}

/** Checks the model and added-token options that would change how text is encoded. */
const checkSupported = (json: typeof TokenizerJsonSchema.Type, hasNormalizer: boolean): void => {
  const { model } = json
  if (model.dropout != null && model.dropout !== 0) fail("model.dropout is not supported (encoding must be deterministic)")
  if (model.continuing_subword_prefix) fail("model.continuing_subword_prefix is not supported")
  if (model.end_of_word_suffix) fail("model.end_of_word_suffix is not supported")
  json.added_tokens.forEach((t, i) => {
    if (t.lstrip || t.rstrip || t.single_word) {
      fail(`added token ${JSON.stringify(t.content)}: lstrip/rstrip/single_word are not supported (they change the text)`)
    }
    // A normalized added token is matched in the normalized text, which can differ from matching
    // it in the raw text (NFC composes ">" + U+0338). The library defaults the flag to true.
    if (hasNormalizer && t.normalized !== false) {
      fail(`added_tokens[${i}].normalized (${JSON.stringify(t.content)}) must be false with a normalizer: reins matches added tokens in the raw text`)
    }
  })
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
    fail(`not a BPE tokenizer file: ${issues.map((i) => where(i.path) + i.message).join("; ")}`)
  }
  const file = (decoded as Either.Right<never, typeof TokenizerJsonSchema.Type>).right
  // byte_fallback is what sets the SentencePiece-style files apart: their vocabulary is characters.
  const pipeline = file.model.byte_fallback ? metaspaceFromJson(file) : pipelineFromJson(file)
  checkSupported(file, pipeline.type === "metaspace" ? pipeline.json.normalizer != null : pipeline.normalizer !== null)
  return {
    vocab: readVocab(file.model.vocab),
    merges: readMerges(file.model.merges),
    addedTokens: file.added_tokens.map((t) => ({ id: t.id, content: t.content, special: t.special })),
    ignoreMerges: file.model.ignore_merges ?? false,
    pipeline
  }
}

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
  ...(spec.pipeline?.type === "metaspace" ? spec.pipeline.json : pipelineToJson(spec.pipeline ?? GPT2_PIPELINE)),
  model: {
    type: "BPE",
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ...(spec.pipeline?.type === "metaspace" ? { ...spec.pipeline.model, byte_fallback: true } : {}),
    ignore_merges: spec.ignoreMerges,
    vocab: Object.fromEntries([...spec.vocab].sort((a, b) => a[1] - b[1])),
    merges: spec.merges.map(([l, r]) => [l, r])
  }
})
