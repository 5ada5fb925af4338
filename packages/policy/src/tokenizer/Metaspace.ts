/**
 * The SentencePiece-style stages of a `tokenizer.json` (Llama 2, Mistral 7B v0.1–v0.3,
 * TinyLlama): a BPE over characters with `byte_fallback`, where spaces are shown as "▁" and a
 * character missing from the vocabulary becomes its UTF-8 bytes as `<0xNN>` tokens.
 *
 * Two layouts carry the "▁" in the files these families publish; reins reads both:
 * - the legacy normalizer `Sequence[Prepend("▁"), Replace(" " → "▁")]` with no pre-tokenizer:
 *   every piece of text between added tokens gets a "▁" in front, unconditionally;
 * - the `Metaspace` pre-tokenizer of newer conversions (`replacement: "▁"`, `split: false`) with
 *   `prepend_scheme` `always`, `first` (only the piece at the start of the text) or `never`:
 *   spaces become "▁" and the "▁" is added only when the piece does not already start with one.
 *   No such file is on npm; it is tested on the Llama 2 vocabulary with these stages.
 * The decoder is `Sequence[Replace("▁" → " "), ByteFallback, Fuse]`, optionally followed by
 * `Strip(" ", 1, 0)`, which drops the space the prefix stood for from the start of the text.
 *
 * Either way the whole piece is one BPE word (no split at spaces), as in the library. Anything
 * else is refused with the field that holds it.
 */
import { Schema } from "effect"
import { TokenizerError } from "./TokenizerError.js"

export const SPACE = "\u2581"

/** When a piece of text gets a leading "▁": `prepend` always (the legacy normalizer); the others as Metaspace's prepend_scheme. */
export type MetaspacePrefix = "prepend" | "always" | "first" | "never"

export interface MetaspaceSpec {
  readonly type: "metaspace"
  readonly prefix: MetaspacePrefix
  /** The decoder's final `Strip(" ", 1, 0)`: decoded text loses one leading space. */
  readonly stripLeadingSpace: boolean
  /** The BPE model's `unk_token` and `fuse_unk`, written back (unused: with byte fallback every character has ids). */
  readonly model: { readonly unk_token: string | null; readonly fuse_unk: boolean }
  /** The file's four stages as read, written back unchanged. */
  readonly json: { readonly normalizer: unknown; readonly pre_tokenizer: unknown; readonly post_processor: unknown; readonly decoder: unknown }
}

const fail = (message: string): never => {
  throw new TokenizerError({ message: `tokenizer.json: ${message}` })
}

const show = (v: unknown) => JSON.stringify(v)

/** The stages reins implements, as schemas: a stage is accepted when it is one of these. */
const Space = Schema.Literal(SPACE)
const StringPattern = <S extends string>(s: S) => Schema.Struct({ String: Schema.Literal(s) })
const LegacyNormalizer = Schema.Struct({
  type: Schema.Literal("Sequence"),
  normalizers: Schema.Tuple(
    Schema.Struct({ type: Schema.Literal("Prepend"), prepend: Space }),
    Schema.Struct({ type: Schema.Literal("Replace"), pattern: StringPattern(" "), content: Space })
  )
})
const MetaspacePreTokenizer = Schema.Struct({
  type: Schema.Literal("Metaspace"),
  replacement: Schema.optional(Schema.Unknown),
  prepend_scheme: Schema.optional(Schema.Unknown),
  split: Schema.optional(Schema.Unknown)
})
const ReplaceDecoder = Schema.Struct({ type: Schema.Literal("Replace"), pattern: StringPattern(SPACE), content: Schema.Literal(" ") })
const ByteFallback = Schema.Struct({ type: Schema.Literal("ByteFallback") })
const Fuse = Schema.Struct({ type: Schema.Literal("Fuse") })
const StripOneSpace = Schema.Struct({ type: Schema.Literal("Strip"), content: Schema.Literal(" "), start: Schema.Literal(1), stop: Schema.Literal(0) })
const Decoder = Schema.Struct({
  type: Schema.Literal("Sequence"),
  decoders: Schema.Union(Schema.Tuple(ReplaceDecoder, ByteFallback, Fuse), Schema.Tuple(ReplaceDecoder, ByteFallback, Fuse, StripOneSpace))
})

const prefixFromStages = (normalizer: unknown, preTokenizer: unknown): MetaspacePrefix => {
  if (normalizer != null) {
    if (!Schema.is(LegacyNormalizer)(normalizer)) {
      fail(`normalizer ${show(normalizer)} is not supported with model.byte_fallback (reins implements Sequence[Prepend("▁"), Replace(" " → "▁")] or a Metaspace pre-tokenizer)`)
    }
    if (preTokenizer != null) fail(`pre_tokenizer ${show(preTokenizer)} is not supported after the Prepend/Replace normalizer (the whole piece is one word)`)
    return "prepend"
  }
  if (!Schema.is(MetaspacePreTokenizer)(preTokenizer)) {
    return fail(`pre_tokenizer ${show(preTokenizer)} is not supported with model.byte_fallback (reins implements Metaspace, or the Prepend/Replace normalizer)`)
  }
  if ((preTokenizer.replacement ?? SPACE) !== SPACE) fail(`pre_tokenizer.replacement ${show(preTokenizer.replacement)} is not supported (reins implements "▁")`)
  if (preTokenizer.split !== false) fail(`pre_tokenizer.split ${show(preTokenizer.split ?? true)} is not supported (reins implements split: false, the whole piece as one word)`)
  const scheme = preTokenizer.prepend_scheme ?? "always"
  if (scheme !== "always" && scheme !== "first" && scheme !== "never") fail(`pre_tokenizer.prepend_scheme ${show(scheme)} is not supported (always, first or never)`)
  return scheme as MetaspacePrefix
}

/** Reads the decoder; true when it ends with the Strip of one leading space. */
const stripFromDecoder = (decoder: unknown): boolean => {
  if (!Schema.is(Decoder)(decoder)) {
    return fail(`decoder ${show(decoder)} is not supported with model.byte_fallback (reins implements Sequence[Replace("▁" → " "), ByteFallback, Fuse, Strip(" ", 1, 0)], Strip optional)`)
  }
  return decoder.decoders.length === 4
}

/** Reads the stages of a byte-fallback BPE file. Throws `TokenizerError` naming the field. */
export const metaspaceFromJson = (file: {
  readonly normalizer?: unknown
  readonly pre_tokenizer?: unknown
  readonly post_processor?: unknown
  readonly decoder?: unknown
  readonly model: { readonly unk_token?: string | null | undefined; readonly fuse_unk?: boolean | null | undefined }
}): MetaspaceSpec => ({
  type: "metaspace",
  prefix: prefixFromStages(file.normalizer, file.pre_tokenizer),
  stripLeadingSpace: stripFromDecoder(file.decoder),
  model: { unk_token: file.model.unk_token ?? null, fuse_unk: file.model.fuse_unk ?? false },
  json: { normalizer: file.normalizer ?? null, pre_tokenizer: file.pre_tokenizer ?? null, post_processor: file.post_processor ?? null, decoder: file.decoder }
})

/**
 * The one BPE word a piece of text becomes: spaces as "▁", with the prefix the file asks for.
 * `atStart`: the piece begins the text (Metaspace's `first` scheme prefixes only that one).
 */
export const metaspaceWord = (prefix: MetaspacePrefix, piece: string, atStart: boolean): string => {
  const word = piece.replaceAll(" ", SPACE)
  if (prefix === "prepend") return SPACE + word
  const wanted = prefix === "always" || (prefix === "first" && atStart)
  return wanted && !word.startsWith(SPACE) ? SPACE + word : word
}

/** `<0xNN>` → NN, or -1 for any other token string. */
export const byteTokenValue = (token: string): number => {
  if (token.length !== 6 || !token.startsWith("<0x") || !token.endsWith(">")) return -1
  const hex = token.slice(3, 5)
  return /^[0-9A-F]{2}$/.test(hex) ? parseInt(hex, 16) : -1
}

/** The byte token's string for byte `b` (`<0x0A>`). */
export const byteToken = (b: number): string => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`
