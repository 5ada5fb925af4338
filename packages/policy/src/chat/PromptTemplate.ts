/**
 * What the Gateway (and the model directory) holds as "the chat template": messages + tools →
 * prompt ids, with exact-token reuse of an earlier call, and the output parsers of the model's
 * family. Two implementations:
 *
 *   ChatTemplate      reins's own ChatML (prefix-stable by construction: reuse by rule)
 *   HfPromptTemplate  a Hugging Face model's own template (reuse by comparing renders)
 *
 * `continuePrompt` is the one reuse entry point: the ids of the new prompt that start with the
 * previous call's exact prompt + output ids, or a `ChatTemplateError` when the template does not
 * allow it (it rewrites that history), which the Gateway records as a `template` break.
 */
import type { ChatMessage, ChatTool } from "@reins/protocol"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import type { OutputParsers } from "./OutputParsers.js"

export interface PromptOptions {
  /** The request's `tools` (OpenAI shape). */
  readonly tools?: ReadonlyArray<ChatTool> | undefined
  /** Append the generation prompt (open the assistant's turn). Default false. */
  readonly addGenerationPrompt?: boolean | undefined
  /** The request's `chat_template_kwargs` (e.g. Qwen3's `enable_thinking`); templates without variables ignore them. */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
}

/** What the Gateway keeps from an earlier call to build the next prompt. */
export interface PreviousCall {
  readonly promptIds: ArrayLike<number>
  readonly outputIds: ArrayLike<number>
}

export interface PromptTemplate {
  /** Which implementation: how reuse is decided and how the template is saved. */
  readonly kind: "reins" | "hf"
  /** The parsers for what the model writes (tool calls, reasoning). */
  readonly parsers: OutputParsers
  /** The template's Jinja source (a model with several named ones: its default one). */
  readonly source: string
  /** The prompt as text (control tokens as their text), for display and logs. */
  render(messages: ReadonlyArray<ChatMessage>, options?: PromptOptions): string
  /** The prompt as ids; control-token text inside messages and tools stays plain text. */
  encode(tokenizer: Tokenizer, messages: ReadonlyArray<ChatMessage>, options?: PromptOptions): Int32Array
  /**
   * The prompt of `messages` as `previous.promptIds ++ previous.outputIds ++ ids of the rest`,
   * where `messages[0..start)` are the previous call's messages and its reply. Throws
   * `ChatTemplateError` when the template does not render that history as those ids.
   */
  continuePrompt(tokenizer: Tokenizer, previous: PreviousCall, messages: ReadonlyArray<ChatMessage>, start: number, options?: PromptOptions): Int32Array
}
