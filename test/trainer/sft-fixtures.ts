/**
 * Synthetic calc-like demos for the SFT tests and measurements: system prompt + the calculate
 * tool, "What is A op B?" → assistant tool call → tool result → assistant answer. Seeded.
 */
export const CALC_SYSTEM = "Solve the arithmetic. Use calculate, then reply with the number."

export const CALC_TOOLS = [
  {
    type: "function" as const,
    function: {
      name: "calculate",
      parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] }
    }
  }
]

/** One calc conversation as the harness would have it. */
export const calcDemo = (a: number, op: string, b: number, id = "call_0") => {
  const expression = `${a}${op}${b}`
  const value = op === "+" ? a + b : op === "-" ? a - b : a * b
  return {
    messages: [
      { role: "system", content: CALC_SYSTEM },
      { role: "user", content: `What is ${expression}?` },
      { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "calculate", arguments: JSON.stringify({ expression }) } }] },
      { role: "tool", tool_call_id: id, content: String(value) },
      { role: "assistant", content: String(value) }
    ],
    tools: CALC_TOOLS
  }
}

/** `n` seeded calc demos as JSONL text. */
export const calcDemosJsonl = (n: number, seed = 1): string => {
  let s = seed >>> 0
  const next = (k: number) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s % k
  }
  const lines: Array<string> = []
  for (let i = 0; i < n; i++) lines.push(JSON.stringify(calcDemo(next(100), ["+", "-", "*"][next(3)]!, next(100), `call_${i}`)))
  return lines.join("\n") + "\n"
}
