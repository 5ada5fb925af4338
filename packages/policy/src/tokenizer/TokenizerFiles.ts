/**
 * `tokenizer.json` in a model directory. Writes go to a temporary file that is renamed into
 * place, so a crash mid-write leaves the old file (or none), never a truncated one.
 */
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Tokenizer } from "./Tokenizer.js"
import { TokenizerError } from "./TokenizerError.js"

export const TOKENIZER_FILE = "tokenizer.json"

/** Writes `data` (text as UTF-8) to `file` atomically (temp file in the same directory + rename). */
export const writeFileAtomic = (file: string, data: string | Uint8Array): Promise<void> => {
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`
  return fs
    .writeFile(tmp, data, { encoding: "utf8", flag: "wx" })
    .then(() => fs.rename(tmp, file))
    .catch(async (e: unknown) => {
      await fs.rm(tmp, { force: true })
      throw e
    })
}

const reason = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Reads `dir/tokenizer.json`. Fails with a `TokenizerError` naming the file. */
export const loadTokenizer = (dir: string): Effect.Effect<Tokenizer, TokenizerError> => {
  const file = path.join(dir, TOKENIZER_FILE)
  return Effect.tryPromise({
    try: () => fs.readFile(file, "utf8"),
    catch: (e) => new TokenizerError({ message: `cannot read ${file}: ${reason(e)}`, cause: e })
  }).pipe(
    Effect.flatMap((text) =>
      Effect.try({
        try: () => Tokenizer.fromJSON(JSON.parse(text)),
        catch: (e) =>
          new TokenizerError({
            message: `${file}: ${e instanceof SyntaxError ? `invalid JSON (${e.message})` : reason(e).replace(/^tokenizer\.json: /, "")}`,
            cause: e
          })
      })
    )
  )
}

/** Writes `dir/tokenizer.json` (creating `dir` if needed). */
export const saveTokenizer = (dir: string, tokenizer: Tokenizer): Effect.Effect<void, TokenizerError> => {
  const file = path.join(dir, TOKENIZER_FILE)
  return Effect.tryPromise({
    try: async () => {
      await fs.mkdir(dir, { recursive: true })
      await writeFileAtomic(file, JSON.stringify(tokenizer.toJSON(), null, 2) + "\n")
    },
    catch: (e) => new TokenizerError({ message: `cannot write ${file}: ${reason(e)}`, cause: e })
  })
}
