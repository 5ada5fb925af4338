/**
 * OpenAI request messages → the dicts a Hugging Face chat template expects, following what
 * vLLM's OpenAI server hands `apply_chat_template` (the templates are written against that):
 *
 * - `content` is always a string: text parts concatenated (reins's protocol rule: no
 *   separator), `null`/absent → "" (Qwen3's template calls string methods on it).
 * - `developer` is renamed `system` (the protocol treats both as a system turn; HF templates
 *   know only `system` and would silently drop a `developer` message).
 * - Tool-call `arguments` become the parsed JSON object, as `transformers` documents for tool
 *   use and vLLM does: Llama 3.1's template iterates them with `| items`, others `| tojson`
 *   them. Non-object JSON text stays a string. `toolArguments: "string"` keeps the client's text
 *   (templates that test `arguments is string`, like Qwen's, then write it verbatim).
 * - An assistant's `reasoning_content` (or `reasoning`) is passed under both names, as vLLM does,
 *   so Qwen3's template can write the reasoning of the current tool loop back.
 * Every other field (`name`, `tool_call_id`, …) passes through unchanged.
 */
import type { ChatMessage, ChatTool } from "@reins/protocol"

/** A request message, plus the reasoning fields reasoning models' clients send back. */
export type TemplateMessageInput = ChatMessage & {
  readonly reasoning_content?: string | null | undefined
  readonly reasoning?: string | null | undefined
}

export type ToolArgumentsForm = "object" | "string"

type Part = { readonly type: string; readonly text?: string; readonly refusal?: string }

const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  return (content as ReadonlyArray<Part>).map((p) => (p.type === "text" ? (p.text ?? "") : p.type === "refusal" ? (p.refusal ?? "") : "")).join("")
}

const argumentsValue = (text: string): unknown => {
  try {
    const v: unknown = JSON.parse(text)
    return v !== null && typeof v === "object" && !Array.isArray(v) ? v : text
  } catch {
    return text
  }
}

export const templateMessages = (messages: ReadonlyArray<TemplateMessageInput>, toolArguments: ToolArgumentsForm = "object"): Array<Record<string, unknown>> =>
  messages.map((m) => {
    const out: Record<string, unknown> = { ...m, role: m.role === "developer" ? "system" : m.role, content: textOf(m.content) }
    if (m.role === "assistant") {
      if (m.tool_calls !== undefined) {
        out.tool_calls = m.tool_calls.map((c) => ({
          id: c.id,
          type: c.type,
          function: { name: c.function.name, arguments: toolArguments === "string" ? c.function.arguments : argumentsValue(c.function.arguments) }
        }))
      }
      const reasoning = m.reasoning_content ?? m.reasoning
      delete out.reasoning_content
      delete out.reasoning
      if (typeof reasoning === "string") {
        out.reasoning_content = reasoning
        out.reasoning = reasoning
      }
    }
    for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k]
    return out
  })

/** Tools in `transformers`' format (`{type: "function", function: {...}}`, the OpenAI shape) as plain JSON. */
export const templateTools = (tools: ReadonlyArray<ChatTool> | undefined): Array<unknown> | null =>
  tools === undefined || tools.length === 0 ? null : (JSON.parse(JSON.stringify(tools)) as Array<unknown>)
