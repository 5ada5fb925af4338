/**
 * Incremental detokenization for streaming: push token ids as they are sampled, get the text
 * they complete. A character whose UTF-8 bytes span several tokens is held back until its last
 * byte arrives, so a delta never contains a broken character (or a U+FFFD that a later token
 * would have fixed). The concatenated deltas (including `flush()`) always equal
 * `tokenizer.decode(allIds)`.
 */
import type { Tokenizer } from "./Tokenizer.js"

export class StreamDecoder {
  private utf8 = new TextDecoder("utf-8", { ignoreBOM: true })
  private ids = 0
  /** Whether any text has come out yet: a SentencePiece-style decoder drops the first leading space. */
  private started = false

  constructor(private readonly tokenizer: Tokenizer) {}

  /** How many ids have been pushed. */
  get length(): number {
    return this.ids
  }

  /** Feeds one id or several; returns the text that is now complete (possibly ""). */
  push(ids: number | ArrayLike<number>): string {
    if (typeof ids === "number") return this.emit(this.pushOne(ids))
    let text = ""
    for (let i = 0; i < ids.length; i++) text += this.pushOne(ids[i]!)
    return this.emit(text)
  }

  /**
   * Ends the stream: bytes of an unfinished character come out as U+FFFD, as `decode` renders
   * them. The decoder can be reused afterwards for a new stream.
   */
  flush(): string {
    const text = this.emit(this.utf8.decode())
    this.started = false
    return text
  }

  /** Drops the leading space of the stream's first text where `decode` would. */
  private emit(text: string): string {
    if (this.started || text.length === 0) return text
    this.started = true
    return this.tokenizer.stripsLeadingSpace && text.startsWith(" ") ? text.slice(1) : text
  }

  private pushOne(id: number): string {
    this.ids++
    const bytes = this.tokenizer.tokenBytes(id)
    if (bytes !== undefined) return this.utf8.decode(bytes, { stream: true })
    const added = this.tokenizer.addedToken(id) ?? this.tokenizer.unknownId(id)
    // A control token ends any pending byte run, exactly as `decode` splits runs at it.
    return this.utf8.decode() + added
  }
}
