/**
 * Message keys: what a message contributes to the rendered prompt, as one comparable string.
 * Two histories whose keys are equal render the same text, so the exact token ids of an earlier
 * call can stand for them. The key is tolerant where clients legitimately differ: tool-call
 * arguments are compared as parsed JSON (a client may re-serialize them), assistant content is
 * compared trimmed, a `developer` message is a `system` message, and tool-call ids (which the
 * template does not render) only matter through the tool name they resolve to. An assistant's
 * reasoning (`reasoning_content`, or vLLM's newer `reasoning`) is part of its key when the client
 * sends it: a template may render it.
 */
import type { ChatMessage } from "@reins/protocol"

/** Text of a string or text/refusal parts, as the template concatenates them. */
export const contentText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  let text = ""
  for (const part of content as ReadonlyArray<{ type?: string; text?: string; refusal?: string }>) {
    if (part.type === "text") text += part.text ?? ""
    else if (part.type === "refusal") text += part.refusal ?? ""
  }
  return text
}

/** A tool call's arguments as canonical JSON (parsed and re-serialized), or the raw text if it is not JSON. */
export const canonicalArguments = (args: string): string => {
  try {
    return JSON.stringify(JSON.parse(args))
  } catch {
    return args
  }
}

export interface ReplyCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

/** What the Gateway answered: the assistant message a harness is expected to echo. */
export interface Reply {
  readonly content: string
  readonly toolCalls: ReadonlyArray<ReplyCall>
  /** The reasoning it answered with (`reasoning_content`), if the model wrote a reasoning block. */
  readonly reasoning?: string | undefined
}

/** The reasoning a client sent with an assistant message, if any. */
export const reasoningOf = (message: ChatMessage): string | undefined => {
  if (message.role !== "assistant") return undefined
  const r = message.reasoning_content ?? message.reasoning
  return typeof r === "string" ? r : undefined
}

const callsKey = (calls: ReadonlyArray<{ readonly name: string; readonly arguments: string }>) =>
  calls.map((c) => [c.name, canonicalArguments(c.arguments)])

/** Keys of a message list, in order (tool results resolve their tool name from earlier calls, as the template does). */
export const messageKeys = (messages: ReadonlyArray<ChatMessage>): Array<string> => {
  const names = new Map<string, string>()
  return messages.map((m) => {
    switch (m.role) {
      case "assistant": {
        const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }))
        for (const c of calls) names.set(c.id, c.name)
        const key = ["assistant", m.name ?? null, contentText(m.content).trim(), callsKey(calls)]
        const reasoning = reasoningOf(m)
        return JSON.stringify(reasoning === undefined ? key : [...key, reasoning.trim()])
      }
      case "tool":
        return JSON.stringify(["tool", m.name ?? names.get(m.tool_call_id) ?? null, contentText(m.content)])
      case "developer":
      case "system":
        return JSON.stringify(["system", m.name ?? null, contentText(m.content)])
      default:
        return JSON.stringify([m.role, m.name ?? null, contentText(m.content)])
    }
  })
}

/**
 * Does the harness's assistant message stand for our reply? Tool calls match by their ids (which
 * we generated), or — for a client that re-generates ids — by name and parsed arguments; content
 * matches trimmed, and so does reasoning when the client sends it back.
 */
export const matchesReply = (message: ChatMessage, reply: Reply): boolean => {
  if (message.role !== "assistant") return false
  if (contentText(message.content).trim() !== reply.content.trim()) return false
  const reasoning = reasoningOf(message)
  if (reasoning !== undefined && reasoning.trim() !== (reply.reasoning ?? "").trim()) return false
  const calls = message.tool_calls ?? []
  if (calls.length !== reply.toolCalls.length) return false
  return calls.every((c, i) => {
    const ours = reply.toolCalls[i]!
    return (
      c.id === ours.id ||
      (c.function.name === ours.name && canonicalArguments(c.function.arguments) === canonicalArguments(ours.arguments))
    )
  })
}

/** The key our reply would have as a history message (sent back without its reasoning). */
export const replyKey = (reply: Reply): string =>
  JSON.stringify(["assistant", null, reply.content.trim(), callsKey(reply.toolCalls)])

/**
 * What identifies an assistant message as one of our replies whatever the client kept of it:
 * its content and calls, without name or reasoning.
 */
export const replyIdentity = (content: string, calls: ReadonlyArray<{ readonly name: string; readonly arguments: string }>): string =>
  JSON.stringify([content.trim(), callsKey(calls)])

/**
 * The tools (rendered into the system turn) and the request's `chat_template_kwargs` (which may
 * change any part of the rendering) as a comparable string: a call's ids are only reused for a
 * request with the same ones.
 */
export const toolsKey = (tools: unknown, chatTemplateKwargs?: unknown): string => {
  const t = tools === undefined || tools === null ? "" : JSON.stringify(tools)
  const none = chatTemplateKwargs === undefined || chatTemplateKwargs === null || Object.keys(chatTemplateKwargs as object).length === 0
  return none ? t : `${t}\u0000${JSON.stringify(chatTemplateKwargs)}`
}
