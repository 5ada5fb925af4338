/**
 * SFT data: demo parsing (line-numbered errors), the compact template (tool calls parse back, the
 * prefix property holds), the digit-preserving tokenizer, demos → sequences with loss weight on
 * exactly the assistant tokens, and the deterministic step plan.
 */
import { describe, expect, it } from "@effect/vitest"
import { ChatTemplate, parseToolCalls, type Tokenizer } from "@reins/policy/text"
import type { ChatMessage } from "@reins/protocol"
import {
  buildSequences,
  compactChatTemplate,
  type Demo,
  demoSequence,
  parseDemos,
  planSteps,
  tokenNormalized,
  trainBpeSingleDigits,
  trainDemoTokenizer
} from "@reins/trainer"
import { Effect } from "effect"
import { CALC_TOOLS, calcDemo, calcDemosJsonl } from "./sft-fixtures.js"

const demosOf = (text: string) => Effect.runSync(parseDemos(text, "demos.jsonl")).demos

const corpusDemos = demosOf(calcDemosJsonl(300, 5))
const template = compactChatTemplate()
const tokenizer: Tokenizer = trainDemoTokenizer(corpusDemos.map((d) => d.demo), template, { vocabSize: 600 })
const format = { tokenizer, template }
const eos = tokenizer.eosId

/** The ids and weights of a sequence as readable runs: [text, weighted]. */
const runs = (tokens: Int32Array, weights: Float32Array): Array<[string, boolean]> => {
  const out: Array<[string, boolean]> = []
  let start = 0
  for (let i = 1; i <= tokens.length; i++) {
    if (i < tokens.length && (weights[i] !== 0) === (weights[start] !== 0)) continue
    out.push([tokenizer.decode(tokens.subarray(start, i)), weights[start] !== 0])
    start = i
  }
  return out
}

describe("demo files", () => {
  it.effect("reads conversations and names the line of a bad one", () =>
    Effect.gen(function*() {
      const good = JSON.stringify(calcDemo(1, "+", 2))
      const ok = yield* parseDemos(`${good}\n\n${good}\n`, "d.jsonl")
      expect(ok.demos.map((d) => d.line)).toEqual([1, 3])
      expect(ok.demos[0]!.demo.tools).toEqual(CALC_TOOLS)

      const text = [good, "{not json", JSON.stringify({ messages: [{ role: "user", content: "hi" }] }), JSON.stringify({ messages: [{ role: "wizard", content: "x" }] }), good].join("\n")
      const error = yield* Effect.flip(parseDemos(text, "d.jsonl"))
      expect(error._tag).toBe("DemoError")
      expect(error.line).toBe(2)
      expect(error.message).toMatch(/^d\.jsonl:2: not valid JSON/)

      const skipped = yield* parseDemos(text, "d.jsonl", { skipInvalid: true })
      expect(skipped.demos.map((d) => d.line)).toEqual([1, 5])
      expect(skipped.skipped.map((s) => s.line)).toEqual([2, 3, 4])
      expect(skipped.skipped[1]!.message).toBe("no assistant message: nothing to learn from")
      expect(skipped.skipped[2]!.message).toMatch(/^not a demo/)

      const none = yield* Effect.flip(parseDemos("{bad\n", "d.jsonl", { skipInvalid: true }))
      expect(none.message).toMatch(/all 1 lines are invalid/)
      const first = yield* Effect.flip(parseDemos(JSON.stringify({ messages: [{ role: "assistant", content: "x" }] }), "d.jsonl"))
      expect(first.message).toMatch(/a prompt \(system or user\) must come before it/)
    })
  )
})

describe("compact chat template", () => {
  const demo = calcDemo(37, "+", 48).messages as unknown as ReadonlyArray<ChatMessage>

  it("renders a calc conversation in few tokens, with tool calls the Gateway's parser reads back", () => {
    const text = template.render(demo, { tools: CALC_TOOLS })
    expect(text).toBe(
      "<|im_start|>system\nSolve the arithmetic. Use calculate, then reply with the number.\nTools:\ncalculate(expression: string)<|im_end|>\n" +
        "<|im_start|>user\nWhat is 37+48?<|im_end|>\n" +
        '<|im_start|>assistant\n<tool_call>{"name": "calculate", "arguments": {"expression":"37+48"}}</tool_call><|im_end|>\n' +
        "<|im_start|>tool\n85<|im_end|>\n" +
        "<|im_start|>assistant\n85<|im_end|>\n"
    )
    // The assistant turn as generated (between the generation prompt and <|im_end|>) parses back.
    const pieces = template.renderPieces(demo, { tools: CALC_TOOLS })
    const generated = pieces[2]!.slice(template.generationPrompt.length, -template.assistantTurnEnd.length)
    const parsed = parseToolCalls(generated)
    expect(parsed.errors).toEqual([])
    expect(parsed.content).toBe("")
    expect(parsed.toolCalls.map((c) => [c.name, c.arguments])).toEqual([["calculate", '{"expression":"37+48"}']])
    // Content + two calls, as the default template lays them out.
    const two: ChatMessage = {
      role: "assistant",
      content: "Let me check.",
      tool_calls: [
        { id: "a", type: "function", function: { name: "calculate", arguments: '{"expression": "1+2"}' } },
        { id: "b", type: "function", function: { name: "calculate", arguments: '{"expression": "3*4"}' } }
      ]
    }
    const both = [demo[0]!, demo[1]!, two]
    const piece = template.renderPieces(both, { tools: CALC_TOOLS })[2]!
    expect(piece).toBe(ChatTemplate.default().renderPieces(both)[2])
    const back = parseToolCalls(piece.slice(template.generationPrompt.length, -template.assistantTurnEnd.length))
    expect(back.content).toBe("Let me check.")
    expect(back.toolCalls.map((c) => c.arguments)).toEqual(['{"expression": "1+2"}', '{"expression": "3*4"}'])
    // Much shorter than the default template's tools block.
    const compactIds = template.encode(tokenizer, demo, { tools: CALC_TOOLS }).length
    const defaultIds = ChatTemplate.default().encode(tokenizer, demo, { tools: CALC_TOOLS }).length
    expect(compactIds).toBeLessThan(defaultIds / 2)
  })

  it("keeps the prefix property (every prefix renders as a prefix; the generation prompt only appends)", () => {
    const tools = [
      { type: "function" as const, function: { name: "f", description: "does f", parameters: { type: "object", properties: { a: { type: "string" }, b: { type: "integer" }, c: {} }, required: ["a"] } } },
      { type: "function" as const, function: { name: "g" } }
    ]
    for (const t of [undefined, tools, CALC_TOOLS]) {
      const full = template.render(demo, { tools: t })
      for (let k = 0; k <= demo.length; k++) {
        expect(full.startsWith(template.render(demo.slice(0, k), { tools: t }))).toBe(true)
        const prompted = template.render(demo.slice(0, k), { tools: t, addGenerationPrompt: true })
        expect(prompted).toBe(template.render(demo.slice(0, k), { tools: t }) + "<|im_start|>assistant\n")
      }
    }
    expect(template.render(demo.slice(0, 1), { tools })).toBe("<|im_start|>system\nSolve the arithmetic. Use calculate, then reply with the number.\nTools:\nf(a: string, b?: integer, c?) - does f\ng()<|im_end|>\n")
    expect(template.render([demo[1]!], { tools: CALC_TOOLS })).toBe("<|im_start|>system\nTools:\ncalculate(expression: string)<|im_end|>\n<|im_start|>user\nWhat is 37+48?<|im_end|>\n")
  })
})

describe("demo tokenizer", () => {
  it("keeps every digit a single token", () => {
    const corpus = "pay 1234 then 5678, 99 and 100 times: 2024-01-01 12:30 x1 y22 ".repeat(200)
    const tok = trainBpeSingleDigits(corpus, { vocabSize: 400 })
    for (const text of ["1234", " 5678", "2024-01-01", "x1", "y22 99"]) {
      const ids = tok.encode(text)
      const digits = text.replace(/[^0-9]/g, "").length
      const digitTokens = [...ids].filter((id) => /[0-9]/.test(tok.decode([id])))
      expect(digitTokens.length).toBe(digits)
      for (const id of digitTokens) expect(tok.decode([id])).toMatch(/^[0-9]$/)
      expect(tok.decode(ids)).toBe(text)
    }
    // No learned token holds a digit; the merges went to words (" then" became a token).
    const vocab = Object.keys((tok.toJSON() as { model: { vocab: Record<string, number> } }).model.vocab)
    expect(vocab.length).toBeGreaterThan(256 + 10)
    expect(vocab.filter((s) => /[0-9]/.test(s))).toEqual(["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"])
    expect(tok.encode(" then").length).toBe(1)
  })

  it("is deterministic and learns only from the demos' rendering", () => {
    const again = trainDemoTokenizer(corpusDemos.map((d) => d.demo), template, { vocabSize: 600 })
    expect(JSON.stringify(again.toJSON())).toBe(JSON.stringify(tokenizer.toJSON()))
    expect(tokenizer.encode("calculate").length).toBe(1)
    expect(tokenizer.encode(" arithmetic").length).toBe(1)
  })
})

describe("demos → sequences", () => {
  const demo = calcDemo(37, "+", 48) as unknown as Demo

  it("puts weight 1 on exactly the assistant tokens: tool call text, answer and <|im_end|>", () => {
    const seq = demoSequence(format, demo)
    expect(runs(seq.tokens, seq.weights)).toEqual([
      [
        "<|im_start|>system\nSolve the arithmetic. Use calculate, then reply with the number.\nTools:\ncalculate(expression: string)<|im_end|>\n<|im_start|>user\nWhat is 37+48?<|im_end|>\n<|im_start|>assistant\n",
        false
      ],
      ['<tool_call>{"name": "calculate", "arguments": {"expression":"37+48"}}</tool_call><|im_end|>', true],
      ["\n<|im_start|>tool\n85<|im_end|>\n<|im_start|>assistant\n", false],
      ["85<|im_end|>", true]
    ])
    // Token by token: the call starts with the control token, digits are single tokens.
    const weighted = [...seq.tokens].filter((_, i) => seq.weights[i] === 1)
    expect(weighted[0]).toBe(tokenizer.tokenId("<tool_call>"))
    expect(weighted.slice(-3).map((id) => tokenizer.decode([id]))).toEqual(["8", "5", "<|im_end|>"])
    expect(weighted.filter((id) => id === eos).length).toBe(2)
    expect(seq.assistantTokens).toBe(weighted.length)
    // In the canonical case the chain of prompts and outputs is the fresh encoding of the whole
    // conversation (without the "\n" the template writes after the last turn).
    const fresh = template.encode(tokenizer, demo.messages, { tools: demo.tools })
    expect([...seq.tokens]).toEqual([...fresh.subarray(0, fresh.length - 1)])
  })

  it("tokenizes an assistant turn as generated, not merged with the prompt before it", () => {
    const messages = [...demo.messages.slice(0, 4), { role: "assistant", content: "  85" }] as ReadonlyArray<ChatMessage>
    const seq = demoSequence(format, { messages, tools: demo.tools })
    const last = [...seq.tokens].slice(seq.tokens.lastIndexOf(tokenizer.tokenId("<|im_start|>")!))
    const promptPart = [tokenizer.tokenId("<|im_start|>")!, ...tokenizer.encode("assistant\n")]
    expect(last).toEqual([...promptPart, ...tokenizer.encode("  85"), eos])
    expect(seq.weights.subarray(seq.tokens.length - tokenizer.encode("  85").length - 1).every((w) => w === 1)).toBe(true)
    expect(seq.weights[seq.tokens.length - tokenizer.encode("  85").length - 2]).toBe(0)
  })

  it("keeps control-token text typed in messages as plain text", () => {
    const messages = [
      { role: "user", content: "say <|im_end|>" },
      { role: "assistant", content: "ok <tool_call> is text" }
    ] as ReadonlyArray<ChatMessage>
    const seq = demoSequence(format, { messages })
    const weighted = [...seq.tokens].filter((_, i) => seq.weights[i] === 1)
    expect(weighted).toEqual([...tokenizer.encode("ok <tool_call> is text"), eos])
    expect([...seq.tokens].filter((id) => id === eos).length).toBe(2) // the user's turn end + the assistant's
  })

  it("drops demos longer than the context, with a reason", () => {
    const lines = corpusDemos.slice(0, 3)
    const long = { line: 99, demo: { ...lines[0]!.demo, messages: [{ role: "user" as const, content: "word ".repeat(200) }, ...lines[0]!.demo.messages.slice(1)] } }
    const built = buildSequences(format, [...lines, long], 128)
    expect(built.sequences.length).toBe(3)
    expect(built.lines).toEqual([lines[0]!.line, lines[1]!.line, lines[2]!.line])
    expect(built.dropped.map((d) => [d.line, d.reason])).toEqual([[99, "too-long"]])
    expect(built.dropped[0]!.message).toMatch(/more than the context of 128/)
  })
})

describe("step plan", () => {
  it("is a seeded shuffle per epoch, the same for the same seed", () => {
    const a = planSteps({ count: 10, batchSize: 4, epochs: 2, seed: 3 })
    expect(a.map((s) => s.length)).toEqual([4, 4, 4, 4, 4])
    const flat = a.flatMap((s) => [...s])
    expect([...flat.slice(0, 10)].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect([...flat.slice(10)].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(planSteps({ count: 10, batchSize: 4, epochs: 2, seed: 3 })).toEqual(a)
    expect(planSteps({ count: 10, batchSize: 4, epochs: 2, seed: 4 })).not.toEqual(a)
    expect(planSteps({ count: 10, batchSize: 4, steps: 7, seed: 3 }).length).toBe(7)
    expect(planSteps({ count: 10, batchSize: 4, epochs: 1, seed: 3 }).map((s) => s.length)).toEqual([4, 4, 2])
  })

  it("token-normalizes each step: weights sum to 1 over its assistant tokens", () => {
    const built = buildSequences(format, corpusDemos.slice(0, 5), 256)
    const step = tokenNormalized(built.sequences, [0, 2, 4])
    const sum = step.reduce((s, q) => s + q.weights.reduce((a, b) => a + b, 0), 0)
    expect(sum).toBeCloseTo(1, 5)
    expect(step[1]!.tokens).toBe(built.sequences[2]!.tokens)
  })
})
