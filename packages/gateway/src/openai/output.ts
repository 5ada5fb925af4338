/**
 * Sampled ids → what the harness sees: text deltas while streaming, then the final `content`
 * and `tool_calls`. The streamed deltas always concatenate to the final `content`: text that
 * could still become part of a tool call or a stop string (a partial `<tool_call>` or stop
 * sequence at the end, or whitespace that parsing would trim) is held back until it is decided.
 * Special tokens (EOS, turn markers) are not text; `<tool_call>` tags are.
 */
import type { Tokenizer, ToolCallParseError } from "@reins/policy/text"
import type { ReplyCall } from "../prompt/keys.js"
import type { TextCodec } from "./codec.js"

export interface OutputOptions {
  /** Parse `<tool_call>` blocks into tool calls (chat with tool_choice ≠ "none"). */
  readonly parseTools: boolean
  /** Stop sequences: the text ends before the first one. */
  readonly stop: ReadonlyArray<string>
}

export interface FinalOutput {
  readonly content: string
  readonly toolCalls: ReadonlyArray<ReplyCall>
  readonly errors: ReadonlyArray<ToolCallParseError>
  /** The content not streamed yet. */
  readonly delta: string
  /** A stop sequence ended the text. */
  readonly stopped: boolean
}

const heldPrefix = (text: string, end: number, marker: string): number => {
  for (let k = Math.min(marker.length - 1, end); k > 0; k--) {
    if (text.startsWith(marker.slice(0, k), end - k)) return k
  }
  return 0
}

export class OutputText {
  private readonly decoder: ReturnType<TextCodec["streamDecoder"]>
  private readonly open: string
  private readonly skip: ReadonlySet<number>
  private readonly markers: ReadonlyArray<string>
  private text = ""
  private emitted = 0
  private callAt = -1
  private stopped = false

  constructor(
    tokenizer: Tokenizer,
    private readonly codec: TextCodec,
    private readonly options: OutputOptions
  ) {
    this.decoder = codec.streamDecoder(tokenizer)
    this.open = codec.toolCallOpen
    this.skip = new Set(tokenizer.addedTokens.filter((t) => t.special).map((t) => t.id))
    this.markers = [...(options.parseTools ? [this.open] : []), ...options.stop.filter((s) => s.length > 0)]
  }

  /** Feeds sampled ids; returns the content that can be streamed now (possibly ""). */
  push(ids: ArrayLike<number>): string {
    if (this.stopped) return ""
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!
      if (!this.skip.has(id)) this.text += this.decoder.push(id)
    }
    this.applyStop()
    return this.take(false)
  }

  finish(): FinalOutput {
    if (!this.stopped) {
      this.text += this.decoder.flush()
      this.applyStop()
    }
    const parsed = this.options.parseTools ? this.codec.parseToolCalls(this.text) : { content: this.text, toolCalls: [], errors: [] }
    const streamed = this.text.slice(0, this.emitted)
    // Streamed text is always a prefix of the final content (see the class comment).
    const delta = parsed.content.startsWith(streamed) ? parsed.content.slice(streamed.length) : ""
    return { content: parsed.content, toolCalls: parsed.toolCalls, errors: parsed.errors, delta, stopped: this.stopped }
  }

  private applyStop() {
    let cut = -1
    for (const s of this.options.stop) {
      if (s.length === 0) continue
      const i = this.text.indexOf(s, Math.max(0, this.emitted - s.length))
      if (i >= 0 && (cut < 0 || i < cut)) cut = i
    }
    if (cut >= 0) {
      this.text = this.text.slice(0, cut)
      this.stopped = true
    }
  }

  private take(final: boolean): string {
    let end = this.text.length
    if (this.options.parseTools && this.callAt < 0) {
      const at = this.text.indexOf(this.open, Math.max(0, this.emitted - this.open.length))
      if (at >= 0) this.callAt = at
    }
    if (this.callAt >= 0) end = Math.min(end, this.callAt)
    if (!final && !this.stopped) {
      let hold = 0
      for (const m of this.markers) hold = Math.max(hold, heldPrefix(this.text, end, m))
      end -= hold
    }
    // Whitespace before a possible tool call is trimmed by parsing: hold it until text follows.
    if (this.options.parseTools) while (end > this.emitted && /\s/.test(this.text[end - 1]!)) end--
    if (end <= this.emitted) return ""
    const delta = this.text.slice(this.emitted, end)
    this.emitted = end
    return delta
  }
}
