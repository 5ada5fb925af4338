/** `chat_template.jinja` in a model directory (written atomically, like tokenizer.json). */
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { writeFileAtomic } from "../tokenizer/TokenizerFiles.js"
import { CHAT_TEMPLATE_FILE, ChatTemplate } from "./ChatTemplate.js"
import { ChatTemplateError } from "./ChatTemplateError.js"

const reason = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** The text of a template file. */
export const readText = (file: string): Effect.Effect<string, ChatTemplateError> =>
  Effect.tryPromise({ try: () => fs.readFile(file, "utf8"), catch: (e) => new ChatTemplateError({ message: `cannot read ${file}: ${reason(e)}`, cause: e }) })

/** Reads and checks `dir/chat_template.jinja`. */
export const loadChatTemplate = (dir: string): Effect.Effect<ChatTemplate, ChatTemplateError> => {
  const file = path.join(dir, CHAT_TEMPLATE_FILE)
  return readText(file).pipe(
    Effect.flatMap((source) =>
      Effect.try({
        try: () => ChatTemplate.fromString(source),
        catch: (e) => new ChatTemplateError({ message: `${file}: ${reason(e)}`, cause: e })
      })
    )
  )
}

/** Writes `dir/chat_template.jinja` (creating `dir` if needed). */
export const saveChatTemplate = (dir: string, template: ChatTemplate): Effect.Effect<void, ChatTemplateError> => {
  const file = path.join(dir, CHAT_TEMPLATE_FILE)
  return Effect.tryPromise({
    try: async () => {
      await fs.mkdir(dir, { recursive: true })
      await writeFileAtomic(file, template.source)
    },
    catch: (e) => new ChatTemplateError({ message: `cannot write ${file}: ${reason(e)}`, cause: e })
  })
}
