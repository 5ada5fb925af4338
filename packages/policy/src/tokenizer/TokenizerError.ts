/**
 * The one error of the tokenizer module: a bad `tokenizer.json`, a corpus or vocabulary size
 * the trainer cannot use, a token id outside the vocabulary, or a file that cannot be read or
 * written. It is an `Error` (so `Tokenizer.fromJSON` can throw it) and a tagged Effect error
 * (so `loadTokenizer` can fail with it).
 */
import { Data } from "effect"

export class TokenizerError extends Data.TaggedError("TokenizerError")<{
  readonly message: string
  readonly cause?: unknown
}> {}
