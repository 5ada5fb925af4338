/**
 * When a generation ends. Stop tokens (EOS / end of turn) end it on the token itself; stop
 * strings are matched on the decoded text, across token boundaries, as tokens arrive. The token
 * that completes a stop string (or a stop token) is part of the output: it was sampled, and the
 * trainer must see it. Cutting the stop string out of the returned text is the caller's job
 * (the chunk says which string matched).
 */
import { StreamDecoder } from "../tokenizer/StreamDecoder.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"

export class StopMatcher {
  private readonly decoder: StreamDecoder | undefined
  private readonly longest: number
  private tail = ""

  constructor(
    tokenizer: Tokenizer | undefined,
    private readonly stopIds: ReadonlySet<number>,
    private readonly strings: ReadonlyArray<string>
  ) {
    const nonEmpty = strings.filter((s) => s.length > 0)
    this.strings = nonEmpty
    this.longest = Math.max(0, ...nonEmpty.map((s) => s.length))
    if (nonEmpty.length > 0 && tokenizer === undefined) throw new Error("stop strings need a tokenizer to decode the output")
    this.decoder = nonEmpty.length > 0 && tokenizer !== undefined ? new StreamDecoder(tokenizer) : undefined
  }

  /** Feeds the next sampled token; returns why generation stops now, or undefined. */
  push(id: number): { readonly kind: "token" } | { readonly kind: "string"; readonly stop: string } | undefined {
    if (this.stopIds.has(id)) return { kind: "token" }
    if (this.decoder === undefined) return undefined
    const text = this.tail + this.decoder.push(id)
    for (const s of this.strings) if (text.includes(s)) return { kind: "string", stop: s }
    // Keep just enough text to catch a stop string that straddles the next token.
    this.tail = text.slice(Math.max(0, text.length - (this.longest - 1)))
    return undefined
  }
}
