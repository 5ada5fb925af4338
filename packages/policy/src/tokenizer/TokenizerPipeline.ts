/**
 * The stages of a `tokenizer.json` around its BPE model: `normalizer`, `pre_tokenizer`,
 * `post_processor` and `decoder`, restricted to what the byte-level BPE families use:
 *
 * - normalizer: none, or `NFC` (Qwen2/Qwen3);
 * - pre_tokenizer: `ByteLevel` with its GPT-2 pattern (GPT-2, SmolLM2, reins's own tokenizers),
 *   or a `Sequence` of `Split` regexes (behavior `Isolated`) ending in `ByteLevel` (Qwen2/Qwen3
 *   with `use_regex: false`, Llama 3);
 * - post_processor: none, `ByteLevel`, `TemplateProcessing` or a `Sequence` of those. It only
 *   acts when a caller asks the library for `add_special_tokens`; reins never does (every encode
 *   is what `apply_chat_template` does, `add_special_tokens=False`: the chat template writes BOS
 *   itself), so it is kept only to be written back;
 * - decoder: `ByteLevel` (its options only concern offsets; decoding maps characters to bytes).
 *
 * Anything else is refused with the field that holds it: loaded, it would tokenize differently
 * from the library that wrote the file.
 */
import { Either, ParseResult, Schema } from "effect"
import { wordPattern } from "./ByteLevel.js"
import { compileSplitPattern } from "./SplitPattern.js"
import { TokenizerError } from "./TokenizerError.js"

export type SplitPatternJson = { readonly Regex: string } | { readonly String: string }

/** One pre-tokenizer stage. ByteLevel is always the last one. */
export type PreTokenizerStep =
  | { readonly type: "Split"; readonly pattern: SplitPatternJson }
  | { readonly type: "ByteLevel"; readonly useRegex: boolean; readonly trimOffsets: boolean }

export interface PipelineSpec {
  readonly type?: "byteLevel"
  readonly normalizer: "NFC" | null
  readonly preTokenizer: ReadonlyArray<PreTokenizerStep>
  /** The file's `post_processor` as read (see above), written back unchanged. */
  readonly postProcessor: unknown
  /** The file's `decoder` as read (a ByteLevel decoder), written back unchanged. */
  readonly decoder: unknown
}

const byteLevelJson = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true } as const

/** The GPT-2 variant: no normalizer, ByteLevel with its pattern. reins's own tokenizers use it. */
export const GPT2_PIPELINE: PipelineSpec = {
  normalizer: null,
  preTokenizer: [{ type: "ByteLevel", useRegex: true, trimOffsets: true }],
  postProcessor: byteLevelJson,
  decoder: byteLevelJson
}

const fail = (message: string): never => {
  throw new TokenizerError({ message: `tokenizer.json: ${message}` })
}

const OptBool = Schema.optional(Schema.NullOr(Schema.Boolean))
const ByteLevelJson = Schema.Struct({ type: Schema.Literal("ByteLevel"), add_prefix_space: OptBool, trim_offsets: OptBool, use_regex: OptBool })
const SplitJson = Schema.Struct({
  type: Schema.Literal("Split"),
  pattern: Schema.Union(Schema.Struct({ Regex: Schema.String }), Schema.Struct({ String: Schema.String })),
  behavior: Schema.String,
  invert: OptBool
})
const SequenceJson = (key: string) => Schema.Struct({ type: Schema.Literal("Sequence"), [key]: Schema.Array(Schema.Unknown) })
const TemplateJson = Schema.Struct({ type: Schema.Literal("TemplateProcessing"), single: Schema.Array(Schema.Unknown) })

/** Decodes `value` at `field` with `schema`, failing with the first issue and its path. */
const decodeAt = <A, I>(schema: Schema.Schema<A, I>, value: unknown, field: string): A => {
  const decoded = Schema.decodeUnknownEither(schema)(value, { errors: "first" })
  if (Either.isRight(decoded)) return decoded.right
  const issue = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)[0]
  const where = [field, ...(issue?.path ?? []).map(String)].join(".")
  return fail(`${where}: ${issue?.message ?? "invalid"}`)
}

/** The `type` of a stage object, or a failure naming the field. */
const typeOf = (value: unknown, field: string): string => {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return fail(`${field} must be an object, got ${JSON.stringify(value)}`)
  const type = (value as { type?: unknown }).type
  return typeof type === "string" ? type : fail(`${field}.type is missing`)
}

const normalizerFromJson = (json: unknown): "NFC" | null => {
  if (json == null) return null
  const type = typeOf(json, "normalizer")
  if (type === "NFC") return "NFC"
  return fail(`normalizer.type ${JSON.stringify(type)} is not supported (reins implements NFC or no normalizer)`)
}

const byteLevelStep = (json: unknown, field: string): PreTokenizerStep => {
  const b = decodeAt(ByteLevelJson, json, field)
  if (b.add_prefix_space) fail(`${field}.add_prefix_space = true is not supported (it changes the text: decode(encode(s)) would not be s)`)
  return { type: "ByteLevel", useRegex: b.use_regex ?? true, trimOffsets: b.trim_offsets ?? true }
}

const splitStep = (json: unknown, field: string): PreTokenizerStep => {
  const s = decodeAt(SplitJson, json, field)
  if (s.behavior !== "Isolated") fail(`${field}.behavior ${JSON.stringify(s.behavior)} is not supported (reins implements "Isolated", which keeps every piece as a word)`)
  if (s.invert) fail(`${field}.invert = true is not supported`)
  compileSplitPattern(s.pattern, `${field}.pattern`) // refuses what it cannot translate, now rather than at first use
  return { type: "Split", pattern: s.pattern }
}

const preTokenizerFromJson = (json: unknown): ReadonlyArray<PreTokenizerStep> => {
  if (json == null) return fail("pre_tokenizer is missing (a byte-level BPE needs a ByteLevel pre-tokenizer)")
  const type = typeOf(json, "pre_tokenizer")
  let steps: Array<PreTokenizerStep>
  if (type === "ByteLevel") {
    steps = [byteLevelStep(json, "pre_tokenizer")]
  } else if (type === "Sequence") {
    const seq = decodeAt(SequenceJson("pretokenizers"), json, "pre_tokenizer") as { pretokenizers: ReadonlyArray<unknown> }
    steps = seq.pretokenizers.map((p, i) => {
      const field = `pre_tokenizer.pretokenizers[${i}]`
      const t = typeOf(p, field)
      if (t === "Split") return splitStep(p, field)
      if (t === "ByteLevel") return byteLevelStep(p, field)
      return fail(`${field}.type ${JSON.stringify(t)} is not supported (reins implements Split and ByteLevel)`)
    })
  } else {
    return fail(`pre_tokenizer.type ${JSON.stringify(type)} is not supported (reins implements ByteLevel, or a Sequence of Split and ByteLevel)`)
  }
  const last = steps.length - 1
  const where = type === "Sequence" ? `pre_tokenizer.pretokenizers[${last}]` : "pre_tokenizer"
  if (steps[last]?.type !== "ByteLevel") fail(`${where} must be ByteLevel: a byte-level BPE maps bytes last`)
  if (steps.findIndex((s) => s.type === "ByteLevel") !== last) fail("pre_tokenizer has a ByteLevel before its last stage, which reins does not implement")
  const byteLevel = steps[last] as Extract<PreTokenizerStep, { type: "ByteLevel" }>
  if (!byteLevel.useRegex && last === 0) {
    fail(`${where}.use_regex = false with no Split before it is not supported (the whole text would be one word)`)
  }
  return steps
}

const postProcessorFromJson = (json: unknown, field = "post_processor"): unknown => {
  if (json == null) return null
  const type = typeOf(json, field)
  if (type === "ByteLevel") decodeAt(ByteLevelJson, json, field)
  else if (type === "TemplateProcessing") decodeAt(TemplateJson, json, field)
  else if (type === "Sequence") {
    const seq = decodeAt(SequenceJson("processors"), json, field) as { processors: ReadonlyArray<unknown> }
    seq.processors.forEach((p, i) => postProcessorFromJson(p, `${field}.processors[${i}]`))
  } else {
    fail(`${field}.type ${JSON.stringify(type)} is not supported (reins implements ByteLevel, TemplateProcessing or a Sequence of them)`)
  }
  return json
}

const decoderFromJson = (json: unknown): unknown => {
  if (json == null) return fail("decoder is missing (a byte-level BPE needs a ByteLevel decoder)")
  const type = typeOf(json, "decoder")
  if (type !== "ByteLevel") fail(`decoder.type ${JSON.stringify(type)} is not supported (reins implements ByteLevel)`)
  decodeAt(ByteLevelJson, json, "decoder")
  return json
}

/** Reads the four stages of a parsed `tokenizer.json`. Throws `TokenizerError` naming the field. */
export const pipelineFromJson = (file: {
  readonly normalizer?: unknown
  readonly pre_tokenizer?: unknown
  readonly post_processor?: unknown
  readonly decoder?: unknown
}): PipelineSpec => ({
  normalizer: normalizerFromJson(file.normalizer),
  preTokenizer: preTokenizerFromJson(file.pre_tokenizer),
  postProcessor: postProcessorFromJson(file.post_processor),
  decoder: decoderFromJson(file.decoder)
})

const stepToJson = (s: PreTokenizerStep): object =>
  s.type === "Split"
    ? { type: "Split", pattern: s.pattern, behavior: "Isolated", invert: false }
    : { type: "ByteLevel", add_prefix_space: false, trim_offsets: s.trimOffsets, use_regex: s.useRegex }

/** The four stages in the layout the `tokenizers` library writes. */
export const pipelineToJson = (p: PipelineSpec): { normalizer: object | null; pre_tokenizer: object; post_processor: unknown; decoder: unknown } => ({
  normalizer: p.normalizer === null ? null : { type: p.normalizer },
  pre_tokenizer: p.preTokenizer.length === 1 ? stepToJson(p.preTokenizer[0]!) : { type: "Sequence", pretokenizers: p.preTokenizer.map(stepToJson) },
  post_processor: p.postProcessor,
  decoder: p.decoder
})

/** What encode runs before BPE: the normalizer, then the pre-tokenizer's split into words. */
export interface TextPipeline {
  readonly normalize: (text: string) => string
  /** Appends the words of (normalized) `text` to `out`; they concatenate back to `text`. */
  readonly split: (text: string, out: Array<string>) => void
}

/**
 * Split with behavior Isolated: every match is a word and so is every gap between matches (the
 * real patterns match every character, but a gap must not be lost). An empty match makes no word
 * but still ends the gap before it, as in the library (`\p{N}*` cuts "ab" into "a", "b").
 */
const splitIsolated = (re: RegExp, text: string, out: Array<string>): void => {
  re.lastIndex = 0
  let last = 0
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const word = m[0]
    if (m.index > last) out.push(text.slice(last, m.index))
    if (word.length > 0) {
      out.push(word)
    } else {
      // Step over one code point, as a global u-mode match would.
      const cp = text.codePointAt(m.index)
      re.lastIndex = m.index + (cp !== undefined && cp > 0xffff ? 2 : 1)
    }
    last = m.index + word.length
  }
  if (last < text.length) out.push(text.slice(last))
}

export const compilePipeline = (p: PipelineSpec): TextPipeline => {
  const splitters: Array<RegExp> = []
  p.preTokenizer.forEach((s, i) => {
    if (s.type === "Split") splitters.push(compileSplitPattern(s.pattern, `pre_tokenizer.pretokenizers[${i}].pattern`))
    else if (s.useRegex) splitters.push(wordPattern())
  })
  const normalize = p.normalizer === "NFC" ? (t: string) => t.normalize("NFC") : (t: string) => t
  if (splitters.length === 1) {
    const re = splitters[0]!
    return { normalize, split: (text, out) => splitIsolated(re, text, out) }
  }
  return {
    normalize,
    split: (text, out) => {
      let words = [text]
      for (const re of splitters) {
        const next: Array<string> = []
        for (const w of words) splitIsolated(re, w, next)
        words = next
      }
      for (const w of words) out.push(w)
    }
  }
}
