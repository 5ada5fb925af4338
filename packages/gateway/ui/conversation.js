// A recorded call's request and response → one list of turns, whatever protocol the harness
// spoke: OpenAI chat completions, OpenAI Responses, Anthropic Messages. A turn is
// { role, text, reasoning, toolCalls: [{ id, name, args }], toolResultOf }.

const textOf = (content) => {
  if (content === null || content === undefined) return ""
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((p) => (typeof p === "string" ? p : p.text ?? p.content ?? (p.type ? `[${p.type}]` : ""))).join("")
  return JSON.stringify(content)
}

const turn = (role, fields = {}) => ({ role, text: "", reasoning: "", toolCalls: [], toolResultOf: null, ...fields })

const chatMessage = (m) =>
  turn(m.role ?? "?", {
    text: textOf(m.content),
    reasoning: m.reasoning_content ?? "",
    toolCalls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function?.name ?? "?", args: c.function?.arguments ?? "" })),
    toolResultOf: m.role === "tool" ? m.tool_call_id ?? null : null
  })

const chat = (request, response) => {
  const turns = (request?.messages ?? []).map(chatMessage)
  const reply = response?.choices?.[0]?.message
  if (reply) turns.push(chatMessage(reply))
  return turns
}

const responsesItem = (item) => {
  if (typeof item === "string") return turn("user", { text: item })
  switch (item.type) {
    case "function_call":
      return turn("assistant", { toolCalls: [{ id: item.call_id, name: item.name, args: item.arguments }] })
    case "function_call_output":
      return turn("tool", { text: textOf(item.output), toolResultOf: item.call_id })
    case "reasoning":
      return turn("assistant", { reasoning: (item.summary ?? []).map((s) => s.text).join("\n") })
    default:
      return turn(item.role ?? "?", { text: textOf(item.content) })
  }
}

const responses = (request, response) => {
  const turns = []
  if (request?.instructions) turns.push(turn("system", { text: request.instructions }))
  const input = request?.input
  if (typeof input === "string") turns.push(turn("user", { text: input }))
  else for (const item of input ?? []) turns.push(responsesItem(item))
  for (const item of response?.output ?? []) turns.push(responsesItem(item))
  return turns
}

const messagesBlocks = (role, content) => {
  if (typeof content === "string") return [turn(role, { text: content })]
  const main = turn(role)
  const out = [main]
  for (const b of content ?? []) {
    if (b.type === "text") main.text += b.text
    else if (b.type === "thinking") main.reasoning += b.thinking ?? ""
    else if (b.type === "tool_use") main.toolCalls.push({ id: b.id, name: b.name, args: JSON.stringify(b.input) })
    else if (b.type === "tool_result") out.push(turn("tool", { text: textOf(b.content), toolResultOf: b.tool_use_id }))
    else main.text += `[${b.type}]`
  }
  return out.filter((t) => t !== main || t.text || t.reasoning || t.toolCalls.length || out.length === 1)
}

const messages = (request, response) => {
  const turns = []
  if (request?.system) turns.push(turn("system", { text: textOf(request.system) }))
  for (const m of request?.messages ?? []) turns.push(...messagesBlocks(m.role, m.content))
  if (response?.content) turns.push(...messagesBlocks("assistant", response.content))
  return turns
}

/** The turns of one recorded call (its request's history, then its reply). */
export const conversationOf = (call) => {
  switch (call.endpoint) {
    case "responses":
      return responses(call.request, call.response)
    case "messages":
      return messages(call.request, call.response)
    case "completions":
      return [turn("prompt", { text: textOf(call.request?.prompt) }), turn("assistant", { text: call.response?.choices?.[0]?.text ?? "" })]
    default:
      return chat(call.request, call.response)
  }
}
