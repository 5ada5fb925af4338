/**
 * A Hugging Face chat template as a `PromptTemplate`: prompts rendered exactly as
 * `apply_chat_template` renders them, and exact-token reuse decided by comparing text.
 *
 * Real templates rewrite history (Qwen3 drops the reasoning of turns before the latest user
 * query, writes an empty `<think>` block only into the generation prompt, groups consecutive tool
 * results into one user turn), so nothing is assumed about their shape. `continuePrompt` renders
 * the whole new prompt and compares it with the previous call's prompt + output as text: when the
 * rendering starts with that text, the previous ids are kept as they are and only the rest is
 * tokenized; otherwise the template rewrote what the model saw or said, and that is a
 * `ChatTemplateError` (the Gateway's `template` break). The split falls after the model's last
 * sampled token, which for a finished turn is its end-of-turn special token: control tokens
 * split text before BPE, so no merge crosses it.
 *
 * Control tokens in messages: only SPECIAL added tokens (`<|im_end|>`, `<|eot_id|>`, …) are
 * escaped before rendering, so a harness that spells one gets the bytes, never the token. The
 * non-special ones (Qwen's `<think>`, `<tool_call>`, `<tool_response>`) are left in place: the
 * template looks for them (`'</think>' in content`) and the tokenizer library matches them in any
 * text, so the model's own `<tool_call>` comes back as the id it sampled.
 *
 * The comparison runs in the escaped domain: the previous ids are decoded run by run between
 * special tokens, each run escaped like message text, each special token written as itself.
 */
import { ChatTemplateError } from "./ChatTemplateError.js"
import type { HfChatTemplate, HfRenderOptions } from "./HfChatTemplate.js"
import { concatIds, encodeRendered, markerPattern } from "./encodeRendered.js"
import { markerEscaper, type MarkerEscaper } from "./MarkerEscape.js"
import type { OutputParsers, OutputParsersConfig } from "./OutputParsers.js"
import { detectOutputParsers, type DetectedParsers } from "./ParserDetection.js"
import type { PreviousCall, PromptOptions, PromptTemplate } from "./PromptTemplate.js"
import type { ChatMessage } from "@reins/protocol"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"

/** What a tokenizer contributes to escaping and comparing (built once per tokenizer). */
interface TokenizerView {
  readonly escaper: MarkerEscaper
  /** Every added token: what is left of them in an escaped rendering becomes ids. */
  readonly pattern: RegExp | undefined
  readonly special: ReadonlySet<number>
  /** The tokenizer normalizes text to NFC (Qwen2/Qwen3): its ids decode to NFC text. */
  readonly nfc: boolean
}

const EXCERPT = 40

export class HfPromptTemplate implements PromptTemplate {
  readonly kind = "hf" as const
  readonly parsers: OutputParsers
  /** The parsers and why each was chosen. */
  readonly detected: DetectedParsers
  private readonly views = new WeakMap<Tokenizer, TokenizerView>()

  constructor(
    readonly template: HfChatTemplate,
    config?: OutputParsersConfig
  ) {
    this.detected = detectOutputParsers(template.sources(), config)
    this.parsers = { tool: this.detected.tool, reasoning: this.detected.reasoning }
  }

  get source(): string {
    const names = this.template.names
    return this.template.source(names.includes("default") ? "default" : names[0])
  }

  render(messages: ReadonlyArray<ChatMessage>, options?: PromptOptions): string {
    return this.template.render(messages, renderOptions(options))
  }

  encode(tokenizer: Tokenizer, messages: ReadonlyArray<ChatMessage>, options?: PromptOptions): Int32Array {
    const view = this.view(tokenizer)
    return encodeRendered(tokenizer, this.escapedRender(view, messages, options), view.pattern, view.escaper)
  }

  continuePrompt(tokenizer: Tokenizer, previous: PreviousCall, messages: ReadonlyArray<ChatMessage>, _start: number, options?: PromptOptions): Int32Array {
    const view = this.view(tokenizer)
    const rendered = this.escapedRender(view, messages, options)
    const before = escapedText(tokenizer, view, concatIds([previous.promptIds, previous.outputIds]))
    let full = rendered
    // Ids of an NFC tokenizer decode to NFC text; a message in another form is still the same text to it.
    if (!full.startsWith(before) && view.nfc) full = rendered.normalize("NFC")
    if (!full.startsWith(before)) throw mismatch(view.escaper, before, rendered)
    const rest = encodeRendered(tokenizer, full.slice(before.length), view.pattern, view.escaper)
    return concatIds([previous.promptIds, previous.outputIds, rest])
  }

  private escapedRender(view: TokenizerView, messages: ReadonlyArray<ChatMessage>, options?: PromptOptions): string {
    return this.template.render(messages, { ...renderOptions(options), escape: view.escaper.escape })
  }

  private view(tokenizer: Tokenizer): TokenizerView {
    let view = this.views.get(tokenizer)
    if (view === undefined) {
      const specials = tokenizer.addedTokens.filter((t) => t.special)
      const probe = "e\u0301"
      view = {
        escaper: markerEscaper(specials.map((t) => t.content)),
        pattern: markerPattern(tokenizer.addedTokens.map((t) => t.content)),
        special: new Set(specials.map((t) => t.id)),
        nfc: tokenizer.decode(tokenizer.encode(probe)) !== probe
      }
      this.views.set(tokenizer, view)
    }
    return view
  }
}

const renderOptions = (options: PromptOptions | undefined): HfRenderOptions => ({
  tools: options?.tools,
  addGenerationPrompt: options?.addGenerationPrompt ?? false,
  chatTemplateKwargs: options?.chatTemplateKwargs
})

/** Ids → the text an escaped rendering of them has (see the module comment). */
const escapedText = (tokenizer: Tokenizer, view: TokenizerView, ids: Int32Array): string => {
  let text = ""
  let from = 0
  for (let i = 0; i < ids.length; i++) {
    if (!view.special.has(ids[i]!)) continue
    if (i > from) text += view.escaper.escape(tokenizer.decode(ids.subarray(from, i)))
    text += tokenizer.addedToken(ids[i]!)!
    from = i + 1
  }
  if (from < ids.length) text += view.escaper.escape(tokenizer.decode(ids.subarray(from)))
  return text
}

/** Where the new rendering leaves the previous call's text, in words. */
const mismatch = (escaper: MarkerEscaper, before: string, rendered: string): ChatTemplateError => {
  let at = 0
  while (at < before.length && at < rendered.length && before[at] === rendered[at]) at++
  const show = (s: string) => JSON.stringify(escaper.unescape(s.slice(Math.max(0, at - 10), at + EXCERPT)))
  return new ChatTemplateError({
    message:
      `the chat template renders this conversation differently from the previous call's prompt and output ` +
      `(from character ${at}: the call had ${show(before)}, the template now writes ${show(rendered)}), so their token ids cannot be reused`
  })
}
