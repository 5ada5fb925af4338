/**
 * Chat completions and text completions as reply encoders: the JSON body (with the token ids as
 * vLLM's `return_token_ids` adds them) and the `data:` chunks ending in `[DONE]`. Chunks carry
 * their token ids and, when asked, logprobs; the chunk with the `finish_reason` is sent after the
 * call is recorded.
 */
import type { Tokenizer } from "@reins/policy/text"
import type { GenerateChunk } from "@reins/protocol"
import type { Generated, ReplyEncoder } from "../calls/encoder.js"
import { errorBody } from "../http/errors.js"
import { DONE, sse } from "../http/sse.js"
import type { Streamed } from "./output.js"
import * as R from "./responses.js"

export interface OpenAiEncoderOptions {
  readonly head: R.Head
  readonly promptIds: Int32Array
  readonly tokenizer: Tokenizer
  /** Return logprobs (they are always recorded), with this many alternatives. */
  readonly returnLogprobs: boolean
  readonly topLogprobs: number
  /** Streaming: send a last chunk with the usage. */
  readonly includeUsage: boolean
}

const tokenLogprobs = (o: OpenAiEncoderOptions, ids: Int32Array, lps: Float32Array, topIds: Int32Array | undefined, topLps: Float32Array | undefined) => ({
  ids,
  logprobs: lps,
  topIds,
  topLogprobs: topLps,
  k: o.topLogprobs
})

const mergeCompletionLogprobs = (parts: ReadonlyArray<ReturnType<typeof R.completionLogprobs>>) => ({
  tokens: parts.flatMap((p) => p.tokens),
  token_logprobs: parts.flatMap((p) => p.token_logprobs),
  top_logprobs: parts.some((p) => p.top_logprobs) ? parts.flatMap((p) => p.top_logprobs ?? []) : null,
  text_offset: parts.flatMap((p) => p.text_offset)
})

/** `/v1/chat/completions`: `reasoning_content`, `content` and `tool_calls`. */
export const chatEncoder = (o: OpenAiEncoderOptions): ReplyEncoder => {
  const usageExtra = o.includeUsage ? { usage: null } : {}
  let pendingIds: Array<number> = []
  let pendingLogprobs: Array<unknown> = []
  const chunkOf = (choice: Record<string, unknown>) => R.chatChunk(o.head, choice, usageExtra)
  const takePending = () => {
    const ids = pendingIds
    const lps = pendingLogprobs
    pendingIds = []
    pendingLogprobs = []
    return { token_ids: ids, logprobs: o.returnLogprobs ? { content: lps, refusal: null } : null }
  }
  const delta = (text: string, reasoning: string) => ({
    delta: { ...(reasoning === "" ? {} : { reasoning_content: reasoning }), ...(text === "" ? {} : { content: text }) }
  })
  return {
    callId: (id) => id,
    body: (g: Generated) => {
      const { output, sampled } = g
      const logprobs = o.returnLogprobs ? R.chatLogprobs(o.tokenizer, tokenLogprobs(o, sampled.outputIds, sampled.logprobs, sampled.topIds, sampled.topLogprobs)) : null
      return R.chatCompletion(o.head, {
        content: output.content,
        reasoning: output.reasoning,
        toolCalls: output.toolCalls,
        finishReason: g.finish,
        logprobs,
        promptIds: g.promptIds,
        outputIds: sampled.outputIds
      })
    },
    start: () => [sse(R.chatChunk(o.head, { delta: { role: "assistant", content: "" }, token_ids: [] }, { ...usageExtra, prompt_token_ids: Array.from(o.promptIds) }))],
    chunk: (chunk: GenerateChunk, text: Streamed) => {
      pendingIds.push(...chunk.outputIds)
      if (o.returnLogprobs) pendingLogprobs.push(...R.chatLogprobs(o.tokenizer, tokenLogprobs(o, chunk.outputIds, chunk.logprobs, chunk.topIds, chunk.topLogprobs)).content)
      if (text.content === "" && text.reasoning === "") return []
      return [sse(chunkOf({ ...delta(text.content, text.reasoning), ...takePending() }))]
    },
    end: (g: Generated) => {
      const { output } = g
      const events: Array<Uint8Array> = []
      if (output.delta !== "" || output.reasoningDelta !== "") events.push(sse(chunkOf({ ...delta(output.delta, output.reasoningDelta), ...takePending() })))
      if (output.toolCalls.length > 0) {
        const calls = R.toolCallsJson(output.toolCalls).map((c, index) => ({ index, ...c }))
        events.push(sse(chunkOf({ delta: { tool_calls: calls }, ...takePending() })))
      }
      events.push(sse(chunkOf({ delta: {}, ...takePending(), finish_reason: g.finish })))
      if (o.includeUsage) events.push(sse(R.chatChunk(o.head, null, { usage: R.usage(g.promptIds.length, g.sampled.count) })))
      events.push(DONE)
      return events
    },
    error: (e) => [sse(errorBody(e))]
  }
}

/** `/v1/completions`: the raw text, legacy logprobs with text offsets. */
export const completionEncoder = (o: OpenAiEncoderOptions): ReplyEncoder => {
  const usageExtra = o.includeUsage ? { usage: null } : {}
  let pendingIds: Array<number> = []
  let pendingLogprobs: Array<ReturnType<typeof R.completionLogprobs>> = []
  let textOffset = 0
  const chunkOf = (choice: Record<string, unknown>) => R.textChunk(o.head, choice, usageExtra)
  const takePending = () => {
    const ids = pendingIds
    const lps = pendingLogprobs
    pendingIds = []
    pendingLogprobs = []
    return { token_ids: ids, logprobs: o.returnLogprobs ? mergeCompletionLogprobs(lps) : null }
  }
  return {
    callId: (id) => id,
    body: (g: Generated) => {
      const { sampled } = g
      const logprobs = o.returnLogprobs ? R.completionLogprobs(o.tokenizer, tokenLogprobs(o, sampled.outputIds, sampled.logprobs, sampled.topIds, sampled.topLogprobs), 0) : null
      return R.textCompletion(o.head, { text: g.output.content, finishReason: g.finish, logprobs, promptIds: g.promptIds, outputIds: sampled.outputIds })
    },
    start: () => [sse(R.textChunk(o.head, { token_ids: [] }, { ...usageExtra, prompt_token_ids: Array.from(o.promptIds) }))],
    chunk: (chunk: GenerateChunk, text: Streamed) => {
      pendingIds.push(...chunk.outputIds)
      if (o.returnLogprobs) pendingLogprobs.push(R.completionLogprobs(o.tokenizer, tokenLogprobs(o, chunk.outputIds, chunk.logprobs, chunk.topIds, chunk.topLogprobs), textOffset))
      if (text.content === "" && text.reasoning === "") return []
      textOffset += text.content.length
      return [sse(chunkOf({ text: text.content, ...takePending() }))]
    },
    end: (g: Generated) => {
      const { output } = g
      const events: Array<Uint8Array> = []
      if (output.delta !== "" || output.reasoningDelta !== "") events.push(sse(chunkOf({ text: output.delta, ...takePending() })))
      events.push(sse(chunkOf({ text: "", ...takePending(), finish_reason: g.finish })))
      if (o.includeUsage) events.push(sse(R.textChunk(o.head, null, { usage: R.usage(g.promptIds.length, g.sampled.count) })))
      events.push(DONE)
      return events
    },
    error: (e) => [sse(errorBody(e))]
  }
}
