/**
 * OpenAI response shapes (chat completions, text completions, their stream chunks, logprobs),
 * with the token ids as extra fields: `prompt_token_ids` at the top level and `token_ids` on
 * each choice (as vLLM's `return_token_ids` does).
 */
import type { Tokenizer } from "@reins/policy/text"
import { randomBytes } from "node:crypto"
import type { ReplyCall } from "../prompt/keys.js"

export const completionId = (prefix: "chatcmpl" | "cmpl") => `${prefix}-${randomBytes(12).toString("hex")}`

export const usage = (prompt: number, completion: number) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion
})

/** Per-token logprob data as the engine returns it (top alternatives row-major `[n × k]`). */
export interface TokenLogprobs {
  readonly ids: Int32Array
  readonly logprobs: Float32Array
  readonly topIds?: Int32Array | undefined
  readonly topLogprobs?: Float32Array | undefined
  readonly k: number
}

const utf8 = new TextDecoder("utf-8")

const tokenEntry = (tokenizer: Tokenizer, id: number, logprob: number) => {
  const bytes = tokenizer.tokenBytes(id)
  const text = bytes !== undefined ? utf8.decode(bytes) : (tokenizer.addedToken(id) ?? "")
  return { token: text, logprob, bytes: Array.from(bytes ?? Buffer.from(text, "utf8")) }
}

/** `choices[].logprobs.content` of a chat completion. */
export const chatLogprobs = (tokenizer: Tokenizer, t: TokenLogprobs) => {
  const content = []
  for (let i = 0; i < t.ids.length; i++) {
    const top = []
    if (t.topIds && t.topLogprobs) {
      for (let j = 0; j < t.k; j++) top.push(tokenEntry(tokenizer, t.topIds[i * t.k + j]!, t.topLogprobs[i * t.k + j]!))
    }
    content.push({ ...tokenEntry(tokenizer, t.ids[i]!, t.logprobs[i]!), top_logprobs: top })
  }
  return { content, refusal: null }
}

/** `choices[].logprobs` of a text completion (the legacy shape). */
export const completionLogprobs = (tokenizer: Tokenizer, t: TokenLogprobs, textOffset: number) => {
  const tokens: Array<string> = []
  const tokenLogprobs: Array<number> = []
  const top: Array<Record<string, number>> = []
  const offsets: Array<number> = []
  let at = textOffset
  for (let i = 0; i < t.ids.length; i++) {
    const e = tokenEntry(tokenizer, t.ids[i]!, t.logprobs[i]!)
    tokens.push(e.token)
    tokenLogprobs.push(e.logprob)
    offsets.push(at)
    at += e.token.length
    const alternatives: Record<string, number> = {}
    if (t.topIds && t.topLogprobs) {
      for (let j = 0; j < t.k; j++) alternatives[tokenEntry(tokenizer, t.topIds[i * t.k + j]!, 0).token] = t.topLogprobs[i * t.k + j]!
    }
    top.push(alternatives)
  }
  return { tokens, token_logprobs: tokenLogprobs, top_logprobs: t.k > 0 ? top : null, text_offset: offsets }
}

export const toolCallsJson = (calls: ReadonlyArray<ReplyCall>) =>
  calls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } }))

export interface Head {
  readonly id: string
  readonly created: number
  readonly model: string
  readonly fingerprint: string
}

/** The fields every completion body and chunk starts with. */
const headFields = (head: Head, object: string) => ({
  id: head.id,
  object,
  created: head.created,
  model: head.model,
  system_fingerprint: head.fingerprint
})

export const chatCompletion = (
  head: Head,
  r: {
    readonly content: string
    readonly reasoning?: string | undefined
    readonly toolCalls: ReadonlyArray<ReplyCall>
    readonly finishReason: string
    readonly logprobs: unknown
    readonly promptIds: Int32Array
    readonly outputIds: Int32Array
  }
) => ({
  ...headFields(head, "chat.completion"),
  choices: [
    {
      index: 0,
      message: {
        role: "assistant",
        content: r.toolCalls.length > 0 && r.content === "" ? null : r.content,
        // vLLM's field for a reasoning model's reasoning block.
        ...(r.reasoning === undefined ? {} : { reasoning_content: r.reasoning }),
        refusal: null,
        annotations: [],
        ...(r.toolCalls.length > 0 ? { tool_calls: toolCallsJson(r.toolCalls) } : {})
      },
      logprobs: r.logprobs,
      finish_reason: r.finishReason,
      token_ids: Array.from(r.outputIds)
    }
  ],
  usage: usage(r.promptIds.length, r.outputIds.length),
  prompt_token_ids: Array.from(r.promptIds)
})

export const chatChunk = (head: Head, choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => ({
  ...headFields(head, "chat.completion.chunk"),
  choices: choice === null ? [] : [{ index: 0, logprobs: null, finish_reason: null, ...choice }],
  ...extra
})

export const textCompletion = (
  head: Head,
  r: { readonly text: string; readonly finishReason: string; readonly logprobs: unknown; readonly promptIds: Int32Array; readonly outputIds: Int32Array }
) => ({
  ...headFields(head, "text_completion"),
  choices: [{ index: 0, text: r.text, logprobs: r.logprobs, finish_reason: r.finishReason, token_ids: Array.from(r.outputIds) }],
  usage: usage(r.promptIds.length, r.outputIds.length),
  prompt_token_ids: Array.from(r.promptIds)
})

export const textChunk = (head: Head, choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => ({
  ...headFields(head, "text_completion"),
  choices: choice === null ? [] : [{ index: 0, text: "", logprobs: null, finish_reason: null, ...choice }],
  ...extra
})
