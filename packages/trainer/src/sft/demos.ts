/**
 * Demonstration transcripts for supervised fine-tuning: a JSONL file, one conversation per line,
 * in the OpenAI chat shape the Gateway accepts:
 *
 *   {"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", "content": ...,
 *     "tool_calls": [...]}, {"role": "tool", "tool_call_id": ..., "content": ...}, ...], "tools": [...]}
 *
 * Blank lines are ignored. A line that is not JSON, does not match the shape, or has nothing to
 * learn from (no assistant message, or an assistant message before any prompt) is an error naming
 * its line number; with `skipInvalid` such lines are skipped and reported instead.
 */
import { ChatMessage, ChatTool } from "@reins/protocol"
import { Effect, ParseResult, Schema } from "effect"
import * as fs from "node:fs/promises"

export class DemoError extends Schema.TaggedError<DemoError>()("DemoError", {
  /** The demo file. */
  file: Schema.String,
  /** 1-based line number, or 0 when the file as a whole is the problem. */
  line: Schema.Number,
  message: Schema.String
}) {}

export const Demo = Schema.Struct({
  messages: Schema.Array(ChatMessage),
  tools: Schema.optional(Schema.Array(ChatTool))
})
export type Demo = typeof Demo.Type

/** A demo and the line it came from. */
export interface DemoLine {
  readonly line: number
  readonly demo: Demo
}

export interface SkippedLine {
  readonly line: number
  readonly message: string
}

export interface ParsedDemos {
  readonly demos: ReadonlyArray<DemoLine>
  readonly skipped: ReadonlyArray<SkippedLine>
}

export interface ParseDemosOptions {
  /** Skip bad lines (reported in `skipped`) instead of failing on the first one. */
  readonly skipInvalid?: boolean
}

const decodeDemo = Schema.decodeUnknownEither(Demo)

/** What is wrong with one line, or its demo. */
export const parseDemoLine = (text: string): Demo | string => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    return `not valid JSON (${(e as Error).message})`
  }
  const decoded = decodeDemo(json)
  if (decoded._tag === "Left") return `not a demo ({"messages": [...], "tools": [...]}): ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
  const demo = decoded.right
  const first = demo.messages.findIndex((m) => m.role === "assistant")
  if (first < 0) return "no assistant message: nothing to learn from"
  if (first === 0) return "the first message is an assistant message: a prompt (system or user) must come before it"
  return demo
}

/** Parses the text of a demo file. Fails on the first bad line unless `skipInvalid`. */
export const parseDemos = (text: string, file: string, options?: ParseDemosOptions): Effect.Effect<ParsedDemos, DemoError> =>
  Effect.suspend(() => {
    const demos: Array<DemoLine> = []
    const skipped: Array<SkippedLine> = []
    const lines = text.split("\n")
    for (let i = 0; i < lines.length; i++) {
      const raw = lines[i]!.trim()
      if (raw.length === 0) continue
      const parsed = parseDemoLine(raw)
      if (typeof parsed !== "string") demos.push({ line: i + 1, demo: parsed })
      else if (options?.skipInvalid) skipped.push({ line: i + 1, message: parsed })
      else return Effect.fail(new DemoError({ file, line: i + 1, message: `${file}:${i + 1}: ${parsed}` }))
    }
    if (demos.length === 0) {
      const why = skipped.length > 0 ? `all ${skipped.length} lines are invalid (line ${skipped[0]!.line}: ${skipped[0]!.message})` : "it holds no demos"
      return Effect.fail(new DemoError({ file, line: 0, message: `${file}: ${why}` }))
    }
    return Effect.succeed({ demos, skipped })
  })

/** Reads and parses a demo file. */
export const readDemos = (file: string, options?: ParseDemosOptions): Effect.Effect<ParsedDemos, DemoError> =>
  Effect.tryPromise({
    try: () => fs.readFile(file, "utf8"),
    catch: (e) =>
      new DemoError({
        file,
        line: 0,
        message: (e as NodeJS.ErrnoException).code === "ENOENT" ? `demo file not found: ${file}` : `cannot read demo file ${file}: ${(e as Error).message}`
      })
  }).pipe(Effect.flatMap((text) => parseDemos(text, file, options)))
