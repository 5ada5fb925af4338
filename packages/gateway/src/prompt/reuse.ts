/**
 * Exact-token prompts: the prompt of a call reuses the exact prompt + output ids of the earlier
 * call of the same attempt whose conversation the new one extends the furthest, and only the
 * new messages are tokenized. When no earlier call can be reused, the reason is classified
 * (`history-edited`, `template`, `retokenized`, `truncated`) and the prompt is tokenized whole.
 */
import type { PromptTemplate, Tokenizer } from "@reins/policy/text"
import type { BreakReason, ChatMessage, ChatTool, ChatToolCall, PromptReuse } from "@reins/protocol"
import type { Schema } from "effect"
import { canonicalArguments, contentText, matchesReply, messageKeys, reasoningOf, type Reply, replyIdentity, replyKey, toolsKey } from "./keys.js"

/** What an earlier successful chat call of the attempt leaves for the next ones. */
export interface Turn {
  readonly callId: string
  /** Keys of the messages it was prompted with. */
  readonly keys: ReadonlyArray<string>
  readonly toolsKey: string
  readonly promptIds: Int32Array
  readonly outputIds: Int32Array
  readonly reply: Reply
  /** False when its ids are not the policy's exact samples (then they are never reused). */
  readonly exact: boolean
}

export interface PromptFormat {
  readonly tokenizer: Tokenizer
  /** reins's ChatTemplate or the model's own Hugging Face template: one pipeline for both. */
  readonly template: PromptTemplate
}

export type Reuse = Schema.Struct.Type<typeof PromptReuse.fields>

export interface BuiltPrompt {
  readonly promptIds: Int32Array
  readonly keys: ReadonlyArray<string>
  readonly toolsKey: string
  readonly reuse: Reuse
}

const samePrefix = (a: ReadonlyArray<string>, b: ReadonlyArray<string>, n: number) => {
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return false
  return true
}

interface Match {
  readonly turn: Turn
  /** Messages of the new request covered by the turn's prompt + reply. */
  readonly covered: number
  /** The request repeats the turn's prompt exactly (a retry): reuse its prompt ids only. */
  readonly retry: boolean
}

/** The exact turn the new conversation extends the furthest (newest wins a tie). */
export const findMatch = (
  turns: ReadonlyArray<Turn>,
  messages: ReadonlyArray<ChatMessage>,
  keys: ReadonlyArray<string>,
  tk: string
): Match | null => {
  let best: Match | null = null
  for (let i = turns.length - 1; i >= 0; i--) {
    const turn = turns[i]!
    const k = turn.keys.length
    if (!turn.exact || turn.toolsKey !== tk || keys.length < k || !samePrefix(keys, turn.keys, k)) continue
    const covered = keys.length === k ? k : matchesReply(messages[k]!, turn.reply) ? k + 1 : -1
    if (covered < 0) continue
    if (best === null || covered > best.covered) best = { turn, covered, retry: keys.length === k }
  }
  return best
}

/**
 * Why the latest turn could not be extended. `truncated`: the new conversation keeps a prefix of
 * the old one, skips one or more messages, then continues with the old ones in order (the
 * harness dropped turns to fit its context). `retokenized`: the history is what the model
 * produced but its exact ids are unknown. Anything else is `history-edited`.
 */
export const classifyBreak = (
  latest: Turn,
  messages: ReadonlyArray<ChatMessage>,
  keys: ReadonlyArray<string>,
  tk: string
): BreakReason => {
  const n = latest.keys.length
  const expectedLength = n + 1
  /** Does new message `i` stand for old message `j` (`j = n` is the old reply)? */
  const same = (i: number, j: number) =>
    j < n ? keys[i] === latest.keys[j] : keys[i] === replyKey(latest.reply) || matchesReply(messages[i]!, latest.reply)
  let p = 0
  while (p < keys.length && p < expectedLength && same(p, p)) p++
  if (p === expectedLength || (p === keys.length && keys.length === n)) {
    // The text is the old conversation (extended), so only the ids were missing.
    return latest.toolsKey === tk && !latest.exact ? "retokenized" : "history-edited"
  }
  if (latest.toolsKey !== tk || p === keys.length) return "history-edited"
  for (let q = p + 1; q < expectedLength; q++) {
    if (!same(p, q)) continue
    let m = 1
    while (p + m < keys.length && q + m < expectedLength && same(p + m, q + m)) m++
    if (p + m === keys.length || q + m === expectedLength) return "truncated"
  }
  return "history-edited"
}

/**
 * The messages as the template renders them: an assistant message that stands for one of the
 * attempt's replies but came back without its reasoning gets the reasoning the Gateway answered
 * with (most clients keep only `content` and `tool_calls`). A template that keeps reasoning in
 * context (Qwen3's, inside a tool loop) then renders what the model actually wrote, and the
 * earlier ids can be reused; templates that drop it are unaffected. Replies are found by their
 * tool-call ids (unique per response), else by content and calls.
 */
export const withReasoning = (turns: ReadonlyArray<Turn>, messages: ReadonlyArray<ChatMessage>): ReadonlyArray<ChatMessage> => {
  const byIds = new Map<string, string>()
  const byIdentity = new Map<string, string>()
  for (const { reply } of turns) {
    if (reply.reasoning === undefined) continue
    if (reply.toolCalls.length > 0) byIds.set(reply.toolCalls.map((c) => c.id).join("\u0000"), reply.reasoning)
    byIdentity.set(replyIdentity(reply.content, reply.toolCalls), reply.reasoning)
  }
  if (byIdentity.size === 0) return messages
  let out: Array<ChatMessage> | undefined
  messages.forEach((m, i) => {
    if (m.role !== "assistant" || reasoningOf(m) !== undefined) return
    const calls = m.tool_calls ?? []
    const reasoning =
      (calls.length > 0 ? byIds.get(calls.map((c) => c.id).join("\u0000")) : undefined) ??
      byIdentity.get(replyIdentity(contentText(m.content), calls.map((c) => c.function)))
    if (reasoning === undefined) return
    out ??= [...messages]
    out[i] = { ...m, reasoning_content: reasoning }
  })
  return out ?? messages
}

/**
 * The messages with each tool call the attempt answered carrying its arguments exactly as the
 * model wrote them: a client that re-serializes them (Anthropic's `tool_use.input` is an object,
 * so its text is always the client's) would otherwise render other text than was sampled, and a
 * template that renders the arguments string verbatim could not reuse the earlier ids. Calls are
 * found by id and must parse to the same JSON.
 */
export const withAnsweredArguments = (turns: ReadonlyArray<Turn>, messages: ReadonlyArray<ChatMessage>): ReadonlyArray<ChatMessage> => {
  const answered = new Map<string, string>()
  for (const { reply } of turns) for (const c of reply.toolCalls) answered.set(c.id, c.arguments)
  if (answered.size === 0) return messages
  let out: Array<ChatMessage> | undefined
  messages.forEach((m, i) => {
    if (m.role !== "assistant" || m.tool_calls === undefined) return
    const differs = (c: ChatToolCall) => {
      const ours = answered.get(c.id)
      return ours !== undefined && ours !== c.function.arguments && canonicalArguments(ours) === canonicalArguments(c.function.arguments)
    }
    if (!m.tool_calls.some(differs)) return
    out ??= [...messages]
    out[i] = { ...m, tool_calls: m.tool_calls.map((c) => (differs(c) ? { ...c, function: { ...c.function, arguments: answered.get(c.id)! } } : c)) }
  })
  return out ?? messages
}

const isTemplateError = (e: unknown) => typeof e === "object" && e !== null && (e as { _tag?: string })._tag === "ChatTemplateError"

/**
 * The prompt ids of a chat request given the attempt's earlier turns. Throws `ChatTemplateError`
 * when the template cannot render the request at all, `ChatTemplateRaised` when it refuses it.
 */
export const buildPrompt = (
  format: PromptFormat,
  turns: ReadonlyArray<Turn>,
  messages: ReadonlyArray<ChatMessage>,
  tools: ReadonlyArray<ChatTool> | undefined,
  chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
): BuiltPrompt => {
  const keys = messageKeys(messages)
  const tk = toolsKey(tools, chatTemplateKwargs)
  const options = { tools, addGenerationPrompt: true, chatTemplateKwargs }
  const match = findMatch(turns, messages, keys, tk)
  const rendered = withReasoning(turns, withAnsweredArguments(turns, messages))
  if (match !== null) {
    const { turn } = match
    if (match.retry) {
      return { promptIds: turn.promptIds, keys, toolsKey: tk, reuse: { reusedTokens: turn.promptIds.length, fromCallId: turn.callId, break: null } }
    }
    try {
      const promptIds = format.template.continuePrompt(format.tokenizer, turn, rendered, match.covered, options)
      return {
        promptIds,
        keys,
        toolsKey: tk,
        reuse: { reusedTokens: turn.promptIds.length + turn.outputIds.length, fromCallId: turn.callId, break: null }
      }
    } catch (e) {
      if (!isTemplateError(e)) throw e
      const promptIds = format.template.encode(format.tokenizer, rendered, options)
      return { promptIds, keys, toolsKey: tk, reuse: { reusedTokens: 0, fromCallId: null, break: "template" } }
    }
  }
  const promptIds = format.template.encode(format.tokenizer, rendered, options)
  const latest = turns[turns.length - 1]
  const reason = latest === undefined ? null : classifyBreak(latest, messages, keys, tk)
  return { promptIds, keys, toolsKey: tk, reuse: { reusedTokens: 0, fromCallId: null, break: reason } }
}
