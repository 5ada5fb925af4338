/**
 * The chat template: OpenAI-shaped messages (+ tools) → prompt text → token ids, rendered with
 * `@huggingface/jinja` from a `chat_template.jinja` source.
 *
 * The default template (chat_template.jinja beside this file) renders ChatML turns:
 *
 *   tools, first message system:  <|im_start|>system\n{system}\n\n{TOOLS}<|im_end|>\n
 *   tools, no system message:     <|im_start|>system\n{TOOLS}<|im_end|>\n   (before messages[0])
 *   system / developer:           <|im_start|>system\n{content}<|im_end|>\n
 *   user:                         <|im_start|>user\n{content}<|im_end|>\n
 *   assistant:                    <|im_start|>assistant\n{content}{CALLS}<|im_end|>\n
 *   tool:                         <|im_start|>tool\n<tool_response name="{name}">{content}</tool_response><|im_end|>\n
 *   add_generation_prompt:        <|im_start|>assistant\n
 *
 * {content} is the string, or the text parts concatenated. {TOOLS} is a fixed instruction with
 * one `tojson` line per tool (see the template). {CALLS} is, per call, `<tool_call>{"name":
 * NAME, "arguments": ARGS}</tool_call>` where NAME is JSON and ARGS is the call's `arguments`
 * string verbatim; calls are separated by "\n", and so are content and the first call when the
 * content is not empty. {name} of a tool result is the message's `name`, else the name of the
 * latest earlier call with that `tool_call_id`; without one, the tag is `<tool_response>`.
 *
 * Prefix-reuse rule (what the Gateway relies on): the rendering of messages[0..k] is a prefix of
 * the rendering of messages[0..n], every message piece starts with the control token
 * `<|im_start|>`, and the generation prompt is appended text. The model continues a prompt that
 * ends with `<|im_start|>assistant\n` and ends its turn by sampling `<|im_end|>` (the EOS), so
 *
 *   prompt ids(call i+1) = prompt ids(call i) ++ output ids(call i) ++ ids("\n")
 *                          ++ ids(pieces of the messages after the assistant message of call i)
 *                          ++ ids("<|im_start|>assistant\n")
 *
 * which `continuePrompt` computes (appending `<|im_end|>` first when call i's output did not end
 * with it, e.g. it was cut by max_tokens or a stop string). It holds only when the messages up
 * to call i's assistant message and the `tools` are the ones of call i (the tools are part of
 * the first piece): matching them is the caller's job. Because every piece boundary sits next
 * to a control token, and control tokens split text before BPE, these ids equal a fresh
 * `encode` of the whole conversation whenever the assistant message renders to exactly the
 * text the model produced and the model's ids were the canonical tokenization of it.
 *
 * Control-token text inside message content or tool definitions is never turned into control
 * ids by `encode`/`encodeFrom`/`continuePrompt` (see MarkerEscape.ts); `render` returns the
 * plain text, for display and logs.
 */
import { Template } from "@huggingface/jinja"
import type { ChatMessage, ChatTool } from "@reins/protocol"
import { readFileSync } from "node:fs"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { ChatTemplateError } from "./ChatTemplateError.js"
import { concatIds, encodeRendered, markerPattern } from "./encodeRendered.js"
import { mapStrings, markerEscaper, type MarkerEscaper } from "./MarkerEscape.js"
import type { OutputParsers } from "./OutputParsers.js"
import type { PreviousCall, PromptOptions, PromptTemplate } from "./PromptTemplate.js"

export type { PreviousCall } from "./PromptTemplate.js"

/**
 * The request's `tools` (OpenAI shape), rendered into the first system turn, and whether to
 * append the generation prompt (`<|im_start|>assistant\n`; default false).
 */
export type RenderOptions = Pick<PromptOptions, "tools" | "addGenerationPrompt">

/** The default template's source text (chat_template.jinja next to this file). */
export const DEFAULT_CHAT_TEMPLATE: string = readFileSync(new URL("./chat_template.jinja", import.meta.url), "utf8")

export const CHAT_TEMPLATE_FILE = "chat_template.jinja"

/** The EOS text the assistant turn must close with for `continuePrompt`. */
const TURN_END_TOKEN = "<|im_end|>"

const describe = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** reins's template writes calls as `<tool_call>` blocks and has no reasoning block. */
const PARSERS: OutputParsers = { tool: "hermes", reasoning: "none" }

export class ChatTemplate implements PromptTemplate {
  readonly kind = "reins" as const
  readonly parsers: OutputParsers = PARSERS
  /** The text the generation prompt appends, e.g. `<|im_start|>assistant\n`. */
  readonly generationPrompt: string
  /** What the template writes after an assistant message's content, e.g. `<|im_end|>\n`. */
  readonly assistantTurnEnd: string

  private readonly escapers = new WeakMap<Tokenizer, { escaper: MarkerEscaper; pattern: RegExp | undefined }>()

  private constructor(
    readonly source: string,
    private readonly template: Template
  ) {
    const probe = checkTemplate(this)
    this.generationPrompt = probe.generationPrompt
    this.assistantTurnEnd = probe.assistantTurnEnd
  }

  /** Parses a template and checks it on a probe conversation. Throws `ChatTemplateError`. */
  static fromString(source: string): ChatTemplate {
    let template: Template
    try {
      template = new Template(source)
    } catch (e) {
      throw new ChatTemplateError({ message: `chat template does not parse: ${describe(e)}`, cause: e })
    }
    return new ChatTemplate(source, template)
  }

  static default(): ChatTemplate {
    return (defaultTemplate ??= ChatTemplate.fromString(DEFAULT_CHAT_TEMPLATE))
  }

  /** The prompt as text. Throws `ChatTemplateError` if the template raises. */
  render(messages: ReadonlyArray<ChatMessage>, options?: RenderOptions): string {
    return this.renderRaw(messages, options?.tools, options?.addGenerationPrompt ?? false)
  }

  /**
   * The text each message contributes, in order; `pieces.join("")` is `render(messages)`.
   * Renders every prefix (O(n²)): for inspection and tests; the Gateway uses `encodeFrom`.
   */
  renderPieces(messages: ReadonlyArray<ChatMessage>, options?: Pick<RenderOptions, "tools">): Array<string> {
    const pieces: Array<string> = []
    let before = ""
    for (let k = 1; k <= messages.length; k++) {
      const upTo = this.renderRaw(messages.slice(0, k), options?.tools, false)
      pieces.push(suffixAfter(before, upTo, k - 1))
      before = upTo
    }
    return pieces
  }

  /** The prompt as token ids; control-token text in content stays plain text. */
  encode(tokenizer: Tokenizer, messages: ReadonlyArray<ChatMessage>, options?: RenderOptions): Int32Array {
    return this.encodeFrom(tokenizer, messages, 0, options)
  }

  /**
   * The ids of what messages[start..] add to the rendering of messages[0..start] (plus the
   * generation prompt when asked). Two renders, whatever `start` is.
   */
  encodeFrom(tokenizer: Tokenizer, messages: ReadonlyArray<ChatMessage>, start: number, options?: RenderOptions): Int32Array {
    if (!Number.isInteger(start) || start < 0 || start > messages.length) {
      throw new ChatTemplateError({ message: `encodeFrom: start ${start} is outside 0..${messages.length}` })
    }
    const { escaper, pattern } = this.escaperFor(tokenizer)
    const esc = (m: unknown) => mapStrings(m, escaper.escape)
    const msgs = esc(messages) as ReadonlyArray<ChatMessage>
    const tools = options?.tools === undefined ? undefined : (esc(options.tools) as ReadonlyArray<ChatTool>)
    const full = this.renderRaw(msgs, tools, options?.addGenerationPrompt ?? false)
    const head = start === 0 ? "" : this.renderRaw(msgs.slice(0, start), tools, false)
    return encodeRendered(tokenizer, suffixAfter(head, full, start), pattern, escaper)
  }

  /**
   * The next prompt of a conversation, reusing the exact ids of the previous call: its prompt,
   * its sampled output (closed with `<|im_end|>` if it was cut short), the newline the template
   * writes after it, then the messages from `start` on (those after the assistant message that
   * call produced) and the generation prompt when asked.
   */
  continuePrompt(
    tokenizer: Tokenizer,
    previous: PreviousCall,
    messages: ReadonlyArray<ChatMessage>,
    start: number,
    options?: RenderOptions
  ): Int32Array {
    const eos = tokenizer.tokenId(TURN_END_TOKEN)
    if (eos === undefined || !this.assistantTurnEnd.startsWith(TURN_END_TOKEN)) {
      throw new ChatTemplateError({ message: `continuePrompt needs assistant turns that end with ${TURN_END_TOKEN} (this template ends them with ${JSON.stringify(this.assistantTurnEnd)})` })
    }
    const { outputIds, promptIds } = previous
    const closed = outputIds.length > 0 && outputIds[outputIds.length - 1] === eos
    const afterEos = tokenizer.encode(this.assistantTurnEnd.slice(TURN_END_TOKEN.length))
    const rest = this.encodeFrom(tokenizer, messages, start, options)
    return concatIds([promptIds, outputIds, closed ? [] : [eos], afterEos, rest])
  }

  /** @internal renders with the template's own variable names. */
  renderRaw(messages: ReadonlyArray<ChatMessage>, tools: ReadonlyArray<ChatTool> | undefined, addGenerationPrompt: boolean): string {
    try {
      return this.template.render({
        messages,
        tools: tools !== undefined && tools.length > 0 ? tools : undefined,
        add_generation_prompt: addGenerationPrompt,
        bos_token: "",
        eos_token: TURN_END_TOKEN
      })
    } catch (e) {
      throw new ChatTemplateError({ message: `chat template failed to render: ${describe(e)}`, cause: e })
    }
  }

  private escaperFor(tokenizer: Tokenizer) {
    let entry = this.escapers.get(tokenizer)
    if (entry === undefined) {
      const markers = tokenizer.addedTokens.map((t) => t.content)
      entry = { escaper: markerEscaper(markers), pattern: markerPattern(markers) }
      this.escapers.set(tokenizer, entry)
    }
    return entry
  }
}

let defaultTemplate: ChatTemplate | undefined

/** `full` minus its prefix `head`; a template that rewrites earlier turns is an error. */
const suffixAfter = (head: string, full: string, k: number): string => {
  if (!full.startsWith(head)) {
    throw new ChatTemplateError({
      message: `chat template is not prefix-stable: rendering the first ${k} messages is not a prefix of rendering more (it changes earlier turns), so token ids of earlier calls cannot be reused`
    })
  }
  return full.slice(head.length)
}

/** A conversation that exercises every branch of a template. */
const PROBE: ReadonlyArray<ChatMessage> = [
  { role: "system", content: "S" },
  { role: "user", content: "U" },
  { role: "assistant", content: "A", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
  { role: "tool", tool_call_id: "c1", content: "T" },
  { role: "assistant", content: "Q" },
  { role: "user", content: [{ type: "text", text: "V" }] }
]
const PROBE_TOOLS: ReadonlyArray<ChatTool> = [{ type: "function", function: { name: "f", description: "d", parameters: { type: "object", properties: {} } } }]

/**
 * Renders the probe with and without tools and checks what reuse depends on: every prefix
 * renders as a prefix, and the generation prompt only appends. Returns what it learned.
 */
const checkTemplate = (t: ChatTemplate): { generationPrompt: string; assistantTurnEnd: string } => {
  try {
    return probeTemplate(t)
  } catch (e) {
    const message = e instanceof ChatTemplateError ? e.message : describe(e)
    throw new ChatTemplateError({
      message: `${message} (checked on a probe conversation: system, user, assistant with a tool call, tool result, assistant, user; with and without tools)`,
      cause: e
    })
  }
}

const probeTemplate = (t: ChatTemplate): { generationPrompt: string; assistantTurnEnd: string } => {
  for (const tools of [undefined, PROBE_TOOLS]) t.renderPieces(PROBE, { tools })
  const plain = t.renderRaw(PROBE, undefined, false)
  const prompted = t.renderRaw(PROBE, undefined, true)
  if (!prompted.startsWith(plain) || prompted === plain) {
    throw new ChatTemplateError({ message: "chat template: add_generation_prompt must append text to the rendering and change nothing before it" })
  }
  const generationPrompt = prompted.slice(plain.length)
  // The assistant "Q" turn: generation prompt + content + turn end.
  const withQ = t.renderRaw(PROBE.slice(0, 5), undefined, false)
  const beforeQ = t.renderRaw(PROBE.slice(0, 4), undefined, false)
  const qPiece = withQ.slice(beforeQ.length)
  const opened = generationPrompt + "Q"
  if (!qPiece.startsWith(opened)) {
    throw new ChatTemplateError({ message: `chat template: an assistant turn must start with the generation prompt ${JSON.stringify(generationPrompt)} followed by the content` })
  }
  return { generationPrompt, assistantTurnEnd: qPiece.slice(opened.length) }
}
