/**
 * Demos → training sequences, with the token ids the Gateway would have produced.
 *
 * When a harness runs against the Gateway, call k's prompt is the template's encoding of the
 * messages so far plus the generation prompt; the model samples the assistant turn (ending with
 * `<|im_end|>`); call k+1's prompt reuses call k's prompt and output ids exactly and appends only
 * what the new messages add (`ChatTemplate.continuePrompt`). A demo is laid out the same way, one
 * "call" per assistant message, so the sequence is the prompt of the last call followed by its
 * output, and every assistant turn sits in it exactly where a rollout would put it.
 *
 * An assistant turn's ids are what a model emits when it produces that text: the canonical
 * tokenization of the turn's text on its own (not merged with the `assistant\n` before it), with
 * the template's `<tool_call>`/`</tool_call>` as control ids, then `<|im_end|>`. Weight 1 goes on
 * those tokens, 0 on everything the template or the other roles wrote.
 */
import type { ChatMessage, ChatTool } from "@reins/protocol"
import type { ChatTemplate, Tokenizer } from "@reins/policy/text"
import { ChatTemplateError } from "@reins/policy/text"
import type { Demo, DemoLine } from "./demos.js"

export interface PromptFormat {
  readonly tokenizer: Tokenizer
  readonly template: ChatTemplate
}

/** A demo as one training sequence: `weights[i]` is 1 where tokens[i] is an assistant token. */
export interface SftSequence {
  readonly tokens: Int32Array
  readonly weights: Float32Array
  /** Tokens with weight 1. */
  readonly assistantTokens: number
}

const TURN_END = "<|im_end|>"

/** One piece of encoded text: a control token, or a run of ordinary tokens decoded to text. */
type Item = { readonly control: number; readonly text: string } | { readonly control: undefined; readonly text: string }

/** Splits ids at control tokens; ordinary runs are decoded (exactly: each run is one encoded string). */
const items = (tokenizer: Tokenizer, ids: Int32Array): Array<Item> => {
  const out: Array<Item> = []
  let start = 0
  const flush = (end: number) => {
    if (end > start) out.push({ control: undefined, text: tokenizer.decode(ids.subarray(start, end)) })
  }
  for (let i = 0; i < ids.length; i++) {
    const added = tokenizer.addedToken(ids[i]!)
    if (added === undefined) continue
    flush(i)
    out.push({ control: ids[i]!, text: added })
    start = i + 1
  }
  flush(ids.length)
  return out
}

/**
 * The ids a model emits for the assistant message `messages[index]`: its turn's text canonically
 * tokenized, control tokens where the template wrote them, ending with `<|im_end|>`.
 */
export const assistantOutputIds = (
  format: PromptFormat,
  messages: ReadonlyArray<ChatMessage>,
  index: number,
  tools: ReadonlyArray<ChatTool> | undefined
): Int32Array => {
  const { tokenizer, template } = format
  const eos = tokenizer.eosId
  if (!template.assistantTurnEnd.startsWith(TURN_END) || tokenizer.tokenId(TURN_END) !== eos) {
    throw new ChatTemplateError({ message: `the chat template must end assistant turns with ${TURN_END}, the tokenizer's end-of-turn token` })
  }
  // The piece the assistant message adds: generation prompt + turn text + turn end.
  const piece = items(tokenizer, template.encodeFrom(tokenizer, messages.slice(0, index + 1), index, { tools }))
  const text = piece.map((p) => p.text).join("")
  const head = template.generationPrompt
  const tail = template.assistantTurnEnd
  if (!text.startsWith(head) || !text.endsWith(tail) || text.length < head.length + tail.length) {
    throw new ChatTemplateError({
      message: `message ${index}: the chat template does not render an assistant turn as ${JSON.stringify(head)} + content + ${JSON.stringify(tail)}`
    })
  }
  const from = head.length
  const to = text.length - tail.length
  const out: Array<number> = []
  let at = 0
  for (const p of piece) {
    const start = at
    const end = at + p.text.length
    at = end
    if (end <= from || start >= to) continue
    if (p.control !== undefined) {
      if (start < from || end > to) throw new ChatTemplateError({ message: `message ${index}: a control token straddles the assistant turn's boundary` })
      out.push(p.control)
    } else {
      for (const id of tokenizer.encode(p.text.slice(Math.max(0, from - start), Math.min(p.text.length, to - start)))) out.push(id)
    }
  }
  out.push(eos)
  return Int32Array.from(out)
}

/** The training sequence of one demo (see the module comment). Throws `ChatTemplateError`. */
export const demoSequence = (format: PromptFormat, demo: Demo): SftSequence => {
  const { tokenizer, template } = format
  const { messages, tools } = demo
  const options = { tools, addGenerationPrompt: true }
  let last: { promptIds: Int32Array; outputIds: Int32Array; index: number } | undefined
  const spans: Array<readonly [number, number]> = []
  for (let i = 0; i < messages.length; i++) {
    if (messages[i]!.role !== "assistant") continue
    const before = messages.slice(0, i)
    const promptIds = last === undefined ? template.encode(tokenizer, before, options) : template.continuePrompt(tokenizer, last, before, last.index + 1, options)
    const outputIds = assistantOutputIds(format, messages, i, tools)
    spans.push([promptIds.length, promptIds.length + outputIds.length])
    last = { promptIds, outputIds, index: i }
  }
  if (last === undefined) throw new ChatTemplateError({ message: "the demo has no assistant message" })
  const tokens = new Int32Array(last.promptIds.length + last.outputIds.length)
  tokens.set(last.promptIds)
  tokens.set(last.outputIds, last.promptIds.length)
  const weights = new Float32Array(tokens.length)
  let assistantTokens = 0
  for (const [from, to] of spans) {
    weights.fill(1, from, to)
    assistantTokens += to - from
  }
  return { tokens, weights, assistantTokens }
}

/** A demo that did not become a sequence. */
export interface DroppedDemo {
  readonly line: number
  readonly reason: "too-long" | "template"
  readonly message: string
}

export interface BuiltSequences {
  readonly sequences: ReadonlyArray<SftSequence>
  /** The demo line of each sequence. */
  readonly lines: ReadonlyArray<number>
  readonly dropped: ReadonlyArray<DroppedDemo>
}

/**
 * Every demo's sequence; demos longer than `contextLength` tokens (which the model could never
 * see whole) and demos the template cannot render are dropped, with the reason.
 */
export const buildSequences = (format: PromptFormat, demos: ReadonlyArray<DemoLine>, contextLength: number): BuiltSequences => {
  const sequences: Array<SftSequence> = []
  const lines: Array<number> = []
  const dropped: Array<DroppedDemo> = []
  for (const { line, demo } of demos) {
    let sequence: SftSequence
    try {
      sequence = demoSequence(format, demo)
    } catch (e) {
      if (!(e instanceof ChatTemplateError)) throw e
      dropped.push({ line, reason: "template", message: e.message })
      continue
    }
    if (sequence.tokens.length > contextLength) {
      dropped.push({ line, reason: "too-long", message: `${sequence.tokens.length} tokens, more than the context of ${contextLength}` })
      continue
    }
    sequences.push(sequence)
    lines.push(line)
  }
  return { sequences, lines, dropped }
}
