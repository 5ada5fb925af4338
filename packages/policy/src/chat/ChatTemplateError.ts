/** A chat template that does not parse, raises while rendering, or breaks prefix reuse. */
import { Data } from "effect"

export class ChatTemplateError extends Data.TaggedError("ChatTemplateError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/**
 * The template itself refused the conversation with `raise_exception(message)` (e.g. Mistral's
 * "Conversation roles must alternate user/assistant/user/assistant/..."): the request's fault,
 * not the model's, so it is a tag of its own. `templateMessage` is the template's text verbatim.
 */
export class ChatTemplateRaised extends Data.TaggedError("ChatTemplateRaised")<{
  readonly message: string
  readonly templateMessage: string
  /** Which of the model's templates raised ("default", "tool_use", …). */
  readonly template: string
}> {}
