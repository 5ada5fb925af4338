/**
 * `reins tokenizer train --corpus FILE --vocab N --out DIR`: learns a byte-level BPE from a text
 * file and writes `tokenizer.json` and the default `chat_template.jinja` into DIR (the tokenizer
 * half of a model directory).
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { failWith } from "./node.js"

const corpus = Options.file("corpus").pipe(Options.withDescription("UTF-8 text file to learn merges from."))
const vocab = Options.integer("vocab").pipe(
  Options.withDescription("Vocabulary size including the 256 byte tokens and the special tokens (an upper bound: training stops when no pair repeats).")
)
const out = Options.directory("out").pipe(Options.withDescription("Directory to write tokenizer.json and chat_template.jinja into (created if missing)."))
const minFrequency = Options.integer("min-frequency").pipe(
  Options.withDefault(2),
  Options.withDescription("Only merge pairs that occur at least this often.")
)

// Loaded on use, so `reins --help` and the other commands start fast.
const loadText = Effect.promise(() => import("@reins/policy/text"))

const readCorpus = ({ TokenizerError }: typeof import("@reins/policy/text"), file: string) =>
  Effect.tryPromise({
    try: () => fs.readFile(file, "utf8"),
    catch: (e) =>
      new TokenizerError({
        message: (e as NodeJS.ErrnoException).code === "ENOENT" ? `corpus file not found: ${file}` : `cannot read corpus ${file}: ${(e as Error).message}`,
        cause: e
      })
  })

const run = (args: { corpus: string; vocab: number; out: string; minFrequency: number }) =>
  Effect.gen(function* () {
    const textModule = yield* loadText
    const { ChatTemplate, DEFAULT_SPECIAL_TOKENS, saveChatTemplate, saveTokenizer, TokenizerError, trainBpe } = textModule
    const minimum = 256 + DEFAULT_SPECIAL_TOKENS.length
    if (args.vocab < minimum) {
      return yield* new TokenizerError({ message: `--vocab ${args.vocab} is too small: it must be at least ${minimum} (256 byte tokens + ${DEFAULT_SPECIAL_TOKENS.length} special tokens)` })
    }
    const text = yield* readCorpus(textModule, args.corpus)
    const started = performance.now()
    const tokenizer = yield* Effect.try({
      try: () => trainBpe(text, { vocabSize: args.vocab, minFrequency: args.minFrequency }),
      catch: (e) => (e instanceof TokenizerError ? e : new TokenizerError({ message: `training failed: ${String(e)}`, cause: e }))
    })
    const seconds = (performance.now() - started) / 1000
    yield* saveTokenizer(args.out, tokenizer)
    yield* saveChatTemplate(args.out, ChatTemplate.default())
    const merges = tokenizer.vocabSize - 256 - tokenizer.addedTokens.length
    yield* Console.log(
      `trained ${tokenizer.vocabSize} tokens (256 bytes + ${merges} merges + ${tokenizer.addedTokens.length} special) from ${text.length} characters in ${seconds.toFixed(1)} s`
    )
    if (tokenizer.vocabSize < args.vocab) {
      yield* Console.log(`note: the corpus has no more pairs occurring ${args.minFrequency}+ times, so the vocabulary is smaller than --vocab ${args.vocab}`)
    }
    yield* Console.log(`wrote ${path.join(args.out, "tokenizer.json")} and ${path.join(args.out, "chat_template.jinja")}`)
  }).pipe(
    // A clear one-line message and exit code 1 instead of a stack trace for expected failures.
    failWith("reins tokenizer train")
  )

const train = Command.make("train", { corpus, vocab, out, minFrequency }, run).pipe(
  Command.withDescription("Learn a byte-level BPE tokenizer from a corpus; write tokenizer.json and chat_template.jinja.")
)

export const tokenizer = Command.make("tokenizer").pipe(
  Command.withDescription("Tokenizer tools."),
  Command.withSubcommands([train])
)
