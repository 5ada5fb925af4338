/**
 * Sampled ids → what the harness sees: reasoning and content deltas while streaming, then the
 * final `reasoning_content`, `content` and `tool_calls`, per the model's output parsers.
 *
 * The streamed deltas always concatenate to the final fields: text that could still become part
 * of a tool call, a stop string or the end of the reasoning block (a partial marker at the end, or
 * whitespace that parsing would trim) is held back until it is decided.
 *
 * Reasoning (the `qwen3` parser): a reply that opens with `<think>` (after whitespace), or any
 * reply when the prompt itself left the block open, has its text up to `</think>` as reasoning
 * (newlines trimmed at both ends) and the rest, leading newlines dropped, as content — the split
 * `parseThinking` makes. A reply that does not open with the block is content throughout, so that
 * what was streamed as content stays content. A block never closed (the generation was cut) is
 * all reasoning, as vLLM returns it.
 *
 * Special tokens are not text (end of turn, padding), except those the tool parser reads
 * (`<|python_tag|>`, `[TOOL_CALLS]`); Qwen's `<think>` and `<tool_call>` are ordinary added tokens.
 */
import type { OutputParsers, Tokenizer, ToolCallParseError, ToolParserName } from "@reins/policy/text"
import type { ReplyCall } from "../prompt/keys.js"
import type { TextCodec } from "./codec.js"

export interface OutputOptions {
  /** Parse tool calls (chat with tools and tool_choice ≠ "none"). */
  readonly parseTools: boolean
  /** Stop sequences: the text ends before the first one. */
  readonly stop: ReadonlyArray<string>
  /** The model's parsers; none for text completions. */
  readonly parsers: OutputParsers
  /** The prompt ends inside an open reasoning block (its generation prompt wrote `<think>`). */
  readonly reasoningOpen: boolean
}

export interface FinalOutput {
  readonly content: string
  /** The reasoning block's text, when the reply had one. */
  readonly reasoning: string | undefined
  readonly toolCalls: ReadonlyArray<ReplyCall>
  readonly errors: ReadonlyArray<ToolCallParseError>
  /** The content not streamed yet. */
  readonly delta: string
  /** The reasoning not streamed yet. */
  readonly reasoningDelta: string
  /** A stop sequence ended the text. */
  readonly stopped: boolean
  /** The stop sequence that ended it (Anthropic answers with it). */
  readonly stopSequence: string | null
}

/** What may be streamed after a push (either may be ""). */
export interface Streamed {
  readonly reasoning: string
  readonly content: string
}

const NOTHING: Streamed = { reasoning: "", content: "" }

const heldPrefix = (text: string, end: number, marker: string): number => {
  for (let k = Math.min(marker.length - 1, end); k > 0; k--) {
    if (text.startsWith(marker.slice(0, k), end - k)) return k
  }
  return 0
}

/** The reply split so far: `content` is undefined until the reasoning block (if any) is closed. */
interface Split {
  readonly reasoning: string | undefined
  readonly closed: boolean
  readonly content: string | undefined
}

export class OutputText {
  private readonly decoder: ReturnType<TextCodec["streamDecoder"]>
  private readonly skip: ReadonlySet<number>
  private readonly tool: ToolParserName
  private readonly opens: ReadonlyArray<string>
  private readonly stops: ReadonlyArray<string>
  private text = ""
  private scanned = 0
  private stopped = false
  private stopSequence: string | null = null
  /** Where the reasoning text starts in `text`: -1 when the reply has none, undefined while undecided. */
  private thinkFrom: number | undefined
  private reasoningEmitted = 0
  private emitted = 0
  private callAt = -1
  /** llama3_json: the content did not start with a call, so it is plain text. */
  private plain = false

  constructor(
    tokenizer: Tokenizer,
    private readonly codec: TextCodec,
    options: OutputOptions
  ) {
    this.decoder = codec.streamDecoder(tokenizer)
    this.tool = options.parseTools ? options.parsers.tool : "none"
    const keep = new Set(codec.parserTokens[this.tool])
    this.skip = new Set(tokenizer.addedTokens.filter((t) => t.special && !keep.has(t.content)).map((t) => t.id))
    this.opens = codec.toolCallOpen[this.tool]
    this.stops = options.stop.filter((s) => s.length > 0)
    if (options.parsers.reasoning === "none") this.thinkFrom = -1
    else if (options.reasoningOpen) this.thinkFrom = 0
  }

  /** Feeds sampled ids; returns what can be streamed now. */
  push(ids: ArrayLike<number>): Streamed {
    if (this.stopped) return NOTHING
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!
      if (!this.skip.has(id)) this.text += this.decoder.push(id)
    }
    this.applyStop()
    this.decide(false)
    return this.take()
  }

  finish(): FinalOutput {
    if (!this.stopped) {
      this.text += this.decoder.flush()
      this.applyStop()
    }
    this.decide(true)
    const split = this.split()
    const text = split.content ?? ""
    const parsed = this.tool === "none" ? { content: text, toolCalls: [], errors: [] } : this.codec.parseOutput(text, { tool: this.tool, reasoning: "none" }, { parseTools: true })
    const errors = split.reasoning !== undefined && !split.closed ? [{ raw: this.text, message: `no closing ${this.codec.thinkClose} (the generation may have been cut off)` }, ...parsed.errors] : parsed.errors
    const streamed = text.slice(0, this.emitted)
    // Streamed text is always a prefix of the final content (see the module comment).
    const delta = parsed.content.startsWith(streamed) ? parsed.content.slice(streamed.length) : ""
    const reasoning = split.reasoning
    return {
      content: parsed.content,
      reasoning,
      toolCalls: parsed.toolCalls,
      errors,
      delta,
      reasoningDelta: reasoning === undefined ? "" : reasoning.slice(this.reasoningEmitted),
      stopped: this.stopped,
      stopSequence: this.stopSequence
    }
  }

  private applyStop() {
    let cut = -1
    let by: string | null = null
    for (const s of this.stops) {
      const i = this.text.indexOf(s, Math.max(0, this.scanned - s.length))
      if (i >= 0 && (cut < 0 || i < cut)) {
        cut = i
        by = s
      }
    }
    if (cut >= 0) {
      this.text = this.text.slice(0, cut)
      this.stopped = true
      this.stopSequence = by
    }
    this.scanned = this.text.length
  }

  /** Whether the reply opens a reasoning block, once its first characters tell. */
  private decide(final: boolean) {
    if (this.thinkFrom !== undefined) return
    const open = this.codec.thinkOpen
    const head = this.text.trimStart()
    if (head.startsWith(open)) this.thinkFrom = this.text.length - head.length + open.length
    else if (final || !open.startsWith(head)) this.thinkFrom = -1
  }

  private split(): Split {
    if (this.thinkFrom === undefined) return { reasoning: undefined, closed: false, content: undefined }
    if (this.thinkFrom < 0) return { reasoning: undefined, closed: false, content: this.text }
    const close = this.text.indexOf(this.codec.thinkClose, this.thinkFrom)
    if (close < 0) return { reasoning: this.text.slice(this.thinkFrom).replace(/^\n+/, ""), closed: false, content: undefined }
    return {
      reasoning: this.text.slice(this.thinkFrom, close).replace(/^\n+|\n+$/g, ""),
      closed: true,
      content: this.text.slice(close + this.codec.thinkClose.length).replace(/^\n+/, "")
    }
  }

  private take(): Streamed {
    const split = this.split()
    return { reasoning: split.reasoning === undefined ? "" : this.takeReasoning(split), content: split.content === undefined ? "" : this.takeContent(split.content) }
  }

  private takeReasoning(split: Split): string {
    const r = split.reasoning!
    let end = r.length
    if (!split.closed && !this.stopped) {
      let hold = heldPrefix(r, end, this.codec.thinkClose)
      for (const s of this.stops) hold = Math.max(hold, heldPrefix(r, end, s))
      end -= hold
      // Trailing newlines are trimmed if the block closes right after them.
      while (end > this.reasoningEmitted && r[end - 1] === "\n") end--
    }
    if (end <= this.reasoningEmitted) return ""
    const delta = r.slice(this.reasoningEmitted, end)
    this.reasoningEmitted = end
    return delta
  }

  private takeContent(text: string): string {
    let end = text.length
    if (this.tool === "llama3_json") {
      const at = this.leadingCall(text)
      if (at >= 0) end = Math.min(end, at)
    } else if (this.callAt < 0) {
      for (const open of this.opens) {
        const at = text.indexOf(open, Math.max(0, this.emitted - open.length))
        if (at >= 0 && (this.callAt < 0 || at < this.callAt)) this.callAt = at
      }
    }
    if (this.callAt >= 0) end = Math.min(end, this.callAt)
    if (!this.stopped) {
      let hold = 0
      for (const m of [...(this.plain ? [] : this.opens), ...this.stops]) hold = Math.max(hold, heldPrefix(text, end, m))
      end -= hold
    }
    // Whitespace before a possible tool call is trimmed by parsing: hold it until text follows.
    if (this.tool !== "none") while (end > this.emitted && /\s/.test(text[end - 1]!)) end--
    if (end <= this.emitted) return ""
    const delta = text.slice(this.emitted, end)
    this.emitted = end
    return delta
  }

  /**
   * llama3_json calls are JSON at the very start (after whitespace, maybe `<|python_tag|>`): where
   * to hold the content from (-1: nothing to hold, the reply is plain text).
   */
  private leadingCall(text: string): number {
    if (this.plain) return -1
    if (this.callAt >= 0) return this.callAt
    const head = text.trimStart()
    const lead = text.length - head.length
    if (this.opens.some((o) => head.startsWith(o))) return (this.callAt = lead)
    if (head === "" || this.opens.some((o) => o.startsWith(head))) return lead
    this.plain = true
    return -1
  }
}
