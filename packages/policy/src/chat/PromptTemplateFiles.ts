/**
 * A model directory's prompt template, read and written.
 *
 * Which implementation a directory gets:
 * - `tokenizer_config.json` present (every tokenizer `transformers` saves has one): the model's
 *   own Hugging Face template(s), from that file or `chat_template.jinja` (HfTemplateFiles.ts).
 * - otherwise `chat_template.jinja` alone: reins's ChatTemplate when it passes ChatTemplate's
 *   prefix-reuse check (reins's own models), else the same file as a Hugging Face template (a
 *   real template saved without its tokenizer_config.json).
 *
 * Saving a Hugging Face template writes what loading reads back: the default template as
 * `chat_template.jinja`, named ones as `additional_chat_templates/NAME.jinja`, and the special
 * tokens the template sees into `tokenizer_config.json` (other keys of an existing file are
 * kept; its `chat_template` is dropped, the jinja files replace it as in `transformers`).
 */
import { Effect } from "effect"
import { existsSync } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { writeFileAtomic } from "../tokenizer/TokenizerFiles.js"
import { CHAT_TEMPLATE_FILE, ChatTemplate } from "./ChatTemplate.js"
import { ChatTemplateError } from "./ChatTemplateError.js"
import { readText, saveChatTemplate } from "./ChatTemplateFiles.js"
import { HfChatTemplate } from "./HfChatTemplate.js"
import { HfPromptTemplate } from "./HfPromptTemplate.js"
import { ADDITIONAL_CHAT_TEMPLATES_DIR, HF_CHAT_TEMPLATE_FILE, loadHfChatTemplate, TOKENIZER_CONFIG_FILE } from "./HfTemplateFiles.js"
import type { OutputParsersConfig } from "./OutputParsers.js"
import type { PromptTemplate } from "./PromptTemplate.js"

export interface LoadPromptTemplateOptions {
  /** Output parsers of a Hugging Face template (default: detected from the template). */
  readonly parsers?: OutputParsersConfig | undefined
  /** The clock behind `strftime_now`. */
  readonly now?: (() => Date) | undefined
}

const reason = (e: unknown) => (e instanceof Error ? e.message : String(e))

const loadHf = (dir: string, options?: LoadPromptTemplateOptions) =>
  Effect.map(loadHfChatTemplate(dir, { now: options?.now }), (t) => new HfPromptTemplate(t, options?.parsers))

/** Reads `dir`'s template (see the module comment for which kind). */
export const loadPromptTemplate = (dir: string, options?: LoadPromptTemplateOptions): Effect.Effect<PromptTemplate, ChatTemplateError> =>
  Effect.suspend(() => {
    if (existsSync(path.join(dir, TOKENIZER_CONFIG_FILE))) return loadHf(dir, options)
    const file = path.join(dir, CHAT_TEMPLATE_FILE)
    return readText(file).pipe(
      Effect.flatMap((source) =>
        Effect.try({ try: () => ChatTemplate.fromString(source), catch: (e) => e }).pipe(
          Effect.matchEffect({
            // Not reins's kind of template: the same file read as transformers reads it.
            onFailure: () => loadHf(dir, options),
            onSuccess: (template): Effect.Effect<PromptTemplate, ChatTemplateError> => {
              const named = [options?.parsers?.toolParser, options?.parsers?.reasoningParser].filter((p) => p !== undefined && p !== "auto")
              return named.length === 0
                ? Effect.succeed(template)
                : Effect.fail(new ChatTemplateError({ message: `${file}: output parsers (${named.join(", ")}) apply to a Hugging Face chat template; this is reins's own template, which has its own tool-call format` }))
            }
          })
        )
      )
    )
  })

/** Writes `template` into `dir` so that `loadPromptTemplate(dir)` reads it back. */
export const savePromptTemplate = (dir: string, template: PromptTemplate): Effect.Effect<void, ChatTemplateError> => {
  if (template instanceof ChatTemplate) return saveChatTemplate(dir, template)
  if (template instanceof HfPromptTemplate) return saveHf(dir, template.template)
  return Effect.fail(new ChatTemplateError({ message: `cannot save a prompt template of kind ${template.kind}` }))
}

const saveHf = (dir: string, t: HfChatTemplate): Effect.Effect<void, ChatTemplateError> =>
  Effect.tryPromise({
    try: async () => {
      await fs.mkdir(dir, { recursive: true })
      const named = t.names.filter((n) => n !== "default")
      if (t.names.includes("default")) await writeFileAtomic(path.join(dir, HF_CHAT_TEMPLATE_FILE), t.source("default"))
      else await fs.rm(path.join(dir, HF_CHAT_TEMPLATE_FILE), { force: true })
      if (named.length > 0) {
        await fs.mkdir(path.join(dir, ADDITIONAL_CHAT_TEMPLATES_DIR), { recursive: true })
        for (const name of named) await writeFileAtomic(path.join(dir, ADDITIONAL_CHAT_TEMPLATES_DIR, `${name}.jinja`), t.source(name))
      }
      const configFile = path.join(dir, TOKENIZER_CONFIG_FILE)
      const existing = existsSync(configFile) ? (JSON.parse(await fs.readFile(configFile, "utf8")) as Record<string, unknown>) : {}
      const { chat_template: _dropped, ...kept } = existing
      await writeFileAtomic(configFile, JSON.stringify({ ...kept, ...t.specialTokens }, null, 2) + "\n")
    },
    catch: (e) => new ChatTemplateError({ message: `cannot write the chat template into ${dir}: ${reason(e)}`, cause: e })
  })
