/**
 * The chat template(s) of a Hugging Face model directory, found where `transformers` looks:
 *
 * - `tokenizer_config.json` → `chat_template`: a string (the "default" template) or a named
 *   list `[{name, template}, …]` (e.g. "default" and "tool_use"); and the special tokens the
 *   template sees (`bos_token`, `eos_token`, …, as strings or `{content}` AddedToken objects).
 * - `chat_template.jinja`, when present, replaces whatever tokenizer_config.json holds (the
 *   file `transformers` writes since it stopped embedding templates in the config), and
 *   `additional_chat_templates/NAME.jinja` adds named ones beside it (the jinja file is then
 *   "default"), as `transformers` loads them.
 */
import { Effect, Either, ParseResult, Schema } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { ChatTemplateError } from "./ChatTemplateError.js"
import { HfChatTemplate, type HfTemplateOptions, type HfTemplateSpec, type SpecialTokenValues } from "./HfChatTemplate.js"

export const TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
export const HF_CHAT_TEMPLATE_FILE = "chat_template.jinja"
export const ADDITIONAL_CHAT_TEMPLATES_DIR = "additional_chat_templates"

const TokenText = Schema.Union(Schema.String, Schema.Struct({ content: Schema.String }))
const NamedTemplate = Schema.Struct({ name: Schema.String, template: Schema.String })

const SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"] as const
const Token = Schema.optional(Schema.NullOr(TokenText))

/** The part of tokenizer_config.json templates use; every other key is ignored. */
const TemplateConfig = Schema.Struct({
  chat_template: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(NamedTemplate)))),
  bos_token: Token,
  eos_token: Token,
  unk_token: Token,
  sep_token: Token,
  pad_token: Token,
  cls_token: Token,
  mask_token: Token,
  additional_special_tokens: Schema.optional(Schema.NullOr(Schema.Array(TokenText)))
})
type TemplateConfig = typeof TemplateConfig.Type

const text = (t: typeof TokenText.Type) => (typeof t === "string" ? t : t.content)

export interface TemplateFiles {
  /** The parsed tokenizer_config.json, if the directory has one. */
  readonly tokenizerConfig?: unknown
  /** The text of chat_template.jinja, if present. */
  readonly jinja?: string | undefined
  /** additional_chat_templates/NAME.jinja by NAME. */
  readonly additional?: Readonly<Record<string, string>> | undefined
  /** The directory, for messages. */
  readonly dir: string
}

/** Files → templates by name + special tokens. Throws `ChatTemplateError` naming the file and key. */
export const hfTemplateSpec = (files: TemplateFiles): HfTemplateSpec => {
  const configFile = path.join(files.dir, TOKENIZER_CONFIG_FILE)
  let config: TemplateConfig = {}
  if (files.tokenizerConfig !== undefined) {
    const decoded = Schema.decodeUnknownEither(TemplateConfig)(files.tokenizerConfig, { errors: "first" })
    if (Either.isLeft(decoded)) {
      const issues = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
      const where = (p: ReadonlyArray<PropertyKey>) => p.map((k, i) => (typeof k === "number" ? `[${k}]` : i === 0 ? String(k) : `.${String(k)}`)).join("")
      throw new ChatTemplateError({ message: `${configFile}: ${issues.map((i) => `${where(i.path)}: ${i.message}`).join("; ")}` })
    }
    config = decoded.right
  }

  const templates: Record<string, string> = {}
  const fromConfig = config.chat_template
  if (typeof fromConfig === "string") templates.default = fromConfig
  else if (fromConfig != null) {
    for (const [i, { name, template }] of fromConfig.entries()) {
      if (name in templates) throw new ChatTemplateError({ message: `${configFile}: chat_template[${i}]: a second template named "${name}"` })
      templates[name] = template
    }
  }
  // chat_template.jinja clobbers the config's templates, named ones included, as in transformers.
  if (files.jinja !== undefined) {
    for (const k of Object.keys(templates)) delete templates[k]
    templates.default = files.jinja
  }
  for (const [name, source] of Object.entries(files.additional ?? {})) templates[name] = source
  if (Object.keys(templates).length === 0) {
    throw new ChatTemplateError({
      message: `${files.dir}: no chat template: neither ${HF_CHAT_TEMPLATE_FILE} nor a "chat_template" key in ${TOKENIZER_CONFIG_FILE}`
    })
  }

  const specialTokens: Record<string, string | ReadonlyArray<string>> = {}
  for (const k of SPECIAL_KEYS) {
    const v = config[k]
    if (v != null) specialTokens[k] = text(v)
  }
  if (config.additional_special_tokens != null) specialTokens.additional_special_tokens = config.additional_special_tokens.map(text)
  const origin = files.jinja !== undefined ? path.join(files.dir, HF_CHAT_TEMPLATE_FILE) : files.tokenizerConfig !== undefined ? configFile : files.dir
  return { templates, specialTokens: specialTokens as SpecialTokenValues, origin }
}

const reason = (e: unknown) => (e instanceof Error ? e.message : String(e))

const readOptional = (file: string): Effect.Effect<string | undefined, ChatTemplateError> =>
  Effect.tryPromise({
    try: () => fs.readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? undefined : Promise.reject(e))),
    catch: (e) => new ChatTemplateError({ message: `cannot read ${file}: ${reason(e)}`, cause: e })
  })

const readAdditional = (dir: string): Effect.Effect<Record<string, string>, ChatTemplateError> => {
  const folder = path.join(dir, ADDITIONAL_CHAT_TEMPLATES_DIR)
  return Effect.tryPromise({
    try: async () => {
      const names = await fs.readdir(folder).catch((e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? [] : Promise.reject(e)))
      const out: Record<string, string> = {}
      for (const f of names.filter((n) => n.endsWith(".jinja")).sort()) out[f.slice(0, -".jinja".length)] = await fs.readFile(path.join(folder, f), "utf8")
      return out
    },
    catch: (e) => new ChatTemplateError({ message: `cannot read ${folder}: ${reason(e)}`, cause: e })
  })
}

/** Reads a model directory's chat template(s) and special tokens, and parses every template. */
export const loadHfChatTemplate = (dir: string, options?: HfTemplateOptions): Effect.Effect<HfChatTemplate, ChatTemplateError> =>
  Effect.gen(function* () {
    const configFile = path.join(dir, TOKENIZER_CONFIG_FILE)
    const configText = yield* readOptional(configFile)
    const tokenizerConfig =
      configText === undefined
        ? undefined
        : yield* Effect.try({
            try: () => JSON.parse(configText) as unknown,
            catch: (e) => new ChatTemplateError({ message: `${configFile} is not valid JSON: ${reason(e)}`, cause: e })
          })
    const jinja = yield* readOptional(path.join(dir, HF_CHAT_TEMPLATE_FILE))
    const additional = yield* readAdditional(dir)
    return yield* Effect.try({
      try: () => HfChatTemplate.make(hfTemplateSpec({ tokenizerConfig, jinja, additional, dir }), options),
      catch: (e) => (e instanceof ChatTemplateError ? e : new ChatTemplateError({ message: `${dir}: ${reason(e)}`, cause: e }))
    })
  })
