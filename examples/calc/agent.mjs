/**
 * What the calc agent says to the model, shared by the harness and the demo generator so that
 * demonstrations are exactly the conversations the deployed harness produces (same system
 * prompt, same tools, same message shapes). Kept short: every character is context for a tiny
 * policy model.
 */
import { calculate } from "./calculator.mjs"

export const SYSTEM_PROMPT = "Solve the arithmetic. Use calculate, then reply with the number."

/** One tool, minimal schema (no descriptions: the name and the parameter say enough). */
export const TOOLS = [
  {
    type: "function",
    function: {
      name: "calculate",
      parameters: { type: "object", properties: { expression: { type: "string" } } }
    }
  }
]

/** The harness's last stdout line is `ANSWER: <answer>`; the verifier reads it back. */
export const ANSWER_PREFIX = "ANSWER:"

/** The opening messages of a conversation about one question. */
export const firstMessages = (question) => [
  { role: "system", content: SYSTEM_PROMPT },
  { role: "user", content: question }
]

/**
 * The assistant message as the harness sends it back on the next call: only the fields the
 * chat template reads, in a fixed shape (demos build the same shape).
 */
export const assistantMessage = (content, toolCalls) =>
  toolCalls !== undefined && toolCalls.length > 0
    ? {
      role: "assistant",
      content: content === "" ? null : content ?? null,
      tool_calls: toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } }))
    }
    : { role: "assistant", content: content ?? "" }

/** The tool's text reply to one call; never throws (bad calls get an `error: ...` text the model can read). */
export const runToolCall = (call) => {
  const name = call?.function?.name
  if (name !== "calculate") return `error: unknown tool ${JSON.stringify(name ?? null)}, use calculate`
  let args
  try {
    args = JSON.parse(call.function.arguments ?? "")
  } catch {
    return 'error: arguments must be JSON like {"expression": "2+3"}'
  }
  if (typeof args?.expression !== "string") return 'error: arguments must be JSON like {"expression": "2+3"}'
  return calculate(args.expression)
}

/** The answer in the model's final text: its last number (canonical form), else the text itself on one line. */
export const extractAnswer = (text) => {
  const s = typeof text === "string" ? text : ""
  const numbers = s.match(/-?\d+(?:\.\d+)?/g)
  if (numbers !== null) return String(Number(numbers.at(-1)))
  return s.replace(/\s+/g, " ").trim()
}
