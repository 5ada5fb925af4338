/** A chat template that does not parse, raises while rendering, or breaks prefix reuse. */
import { Data } from "effect"

export class ChatTemplateError extends Data.TaggedError("ChatTemplateError")<{
  readonly message: string
  readonly cause?: unknown
}> {}
