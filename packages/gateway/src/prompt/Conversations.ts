/**
 * The turns of recent attempts, kept in memory for prompt reuse and rebuilt from the store on a
 * miss (after a restart, or when the attempt fell out of the cache), so reuse never depends on
 * the process having seen the earlier calls.
 */
import type { ChatMessage, LlmCall, StoreError } from "@reins/protocol"
import { Effect, Either } from "effect"
import { replyOfMessage, toConversation as messagesConversation } from "../anthropic/conversation.js"
import { validateMessages } from "../anthropic/request.js"
import type { Conversation } from "../calls/plan.js"
import { recordedResponses, type RecordedResponses, responsesFold } from "../responses/conversation.js"
import type { StoreService } from "../store/Store.js"
import { messageKeys, type Reply, toolsKey } from "./keys.js"
import type { Turn } from "./reuse.js"

interface StoredChoice {
  readonly message?: {
    readonly content?: string | null
    readonly reasoning_content?: string | null
    readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
  }
}

/**
 * The turn a recorded successful chat call left. One without token ids (an upstream that returns
 * none) is kept too, as the live path keeps it: nothing of it is reused (`exact` is false), but a
 * later call that sends its reply back is then known to be `retokenized` rather than
 * `history-edited`, after a restart as before it.
 */
export const turnOfCall = (call: LlmCall): Turn | null => {
  if (call.endpoint !== "chat.completions" || call.status !== 200) return null
  const request = call.request as { messages?: ReadonlyArray<ChatMessage>; tools?: unknown; chat_template_kwargs?: unknown } | null
  const choice = (call.response as { choices?: ReadonlyArray<StoredChoice> } | null)?.choices?.[0]
  if (!request?.messages || !choice?.message) return null
  const reply: Reply = {
    content: choice.message.content ?? "",
    toolCalls: (choice.message.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    ...(typeof choice.message.reasoning_content === "string" ? { reasoning: choice.message.reasoning_content } : {})
  }
  return turnOf(call, { messages: request.messages, tools: request.tools, templateKwargs: request.chat_template_kwargs }, reply)
}

/**
 * The turn of a recorded call whose request decodes (again, as when it was served) to
 * `conversation` (for a chat call: its messages, tools and template variables as sent).
 */
export const turnOf = (
  call: LlmCall,
  conversation: Pick<Conversation, "messages"> & { readonly tools: unknown; readonly templateKwargs: unknown },
  reply: Reply
): Turn => ({
  callId: call.id,
  keys: messageKeys(conversation.messages),
  toolsKey: toolsKey(conversation.tools, conversation.templateKwargs),
  promptIds: call.promptIds,
  outputIds: call.outputIds,
  reply,
  exact: call.trainable
})

/** The reusable turns an attempt's recorded calls left, whatever protocol each spoke. */
export const turnsOfCalls = (calls: ReadonlyArray<LlmCall>): Array<Turn> => {
  const responses = calls.some((c) => c.endpoint === "responses") ? recordedResponses(calls).byId : new Map()
  return calls.flatMap((call): Array<Turn> => {
    if (call.status !== 200) return []
    // Responses and Messages calls leave turns only with ids (relayed ones have none).
    if (call.endpoint !== "chat.completions" && call.outputIds.length === 0) return []
    switch (call.endpoint) {
      case "chat.completions":
        return [turnOfCall(call)].filter((t) => t !== null)
      case "responses": {
        const recorded = responses.get((call.response as { id?: string } | null)?.id ?? "")
        return recorded === undefined ? [] : [turnOf(call, recorded.conversation, recorded.reply)]
      }
      case "messages": {
        const r = validateMessages(call.request)
        return Either.isLeft(r) || call.response === null ? [] : [turnOf(call, messagesConversation(call.request, r.right), replyOfMessage(call.response as Record<string, unknown>))]
      }
      default:
        return []
    }
  })
}

export interface Conversations {
  readonly turns: (attemptId: string) => Effect.Effect<ReadonlyArray<Turn>>
  readonly add: (attemptId: string, turn: Turn) => void
  /**
   * The attempt's recorded Responses (for `previous_response_id`, `item_reference` and `GET`):
   * kept folded per attempt, so each request reads only the calls recorded since the last one.
   */
  readonly responses: (attemptId: string) => Effect.Effect<RecordedResponses, StoreError>
}

/** A small LRU: `get` refreshes an entry, `set` drops the oldest beyond `capacity`. */
const lru = <A>(capacity: number) => {
  const entries = new Map<string, A>()
  const set = (id: string, value: A) => {
    entries.delete(id)
    entries.set(id, value)
    while (entries.size > capacity) entries.delete(entries.keys().next().value!)
  }
  const get = (id: string) => {
    const hit = entries.get(id)
    if (hit !== undefined) set(id, hit)
    return hit
  }
  return { get, set }
}

/**
 * An LRU of `capacity` attempts, each keeping its latest `turnsPerAttempt` turns (prompt reuse
 * looks for the longest conversation the new request extends; in practice a recent one).
 * Loading failures degrade to "no earlier turns" (logged), never to a failed call.
 */
export const make = (store: StoreService, capacity = 256, turnsPerAttempt = 64): Conversations => {
  const cache = lru<Array<Turn>>(capacity)
  const folds = lru<ReturnType<typeof responsesFold>>(capacity)
  return {
    turns: (attemptId) =>
      Effect.suspend(() => {
        const hit = cache.get(attemptId)
        if (hit !== undefined) return Effect.succeed(hit)
        return store.calls(attemptId).pipe(
          Effect.map((calls) => {
            // A concurrent call may have filled the entry meanwhile: keep what it added.
            const turns = cache.get(attemptId) ?? turnsOfCalls(calls).slice(-turnsPerAttempt)
            cache.set(attemptId, turns)
            return turns
          }),
          Effect.catchAll((e) => Effect.logWarning(`prompt reuse: cannot load calls of ${attemptId}: ${e.message}`).pipe(Effect.as([])))
        )
      }),
    add: (attemptId, turn) => {
      const turns = cache.get(attemptId)
      if (turns === undefined) return
      turns.push(turn)
      if (turns.length > turnsPerAttempt) turns.shift()
    },
    responses: (attemptId) =>
      Effect.suspend(() => {
        const fold = folds.get(attemptId) ?? responsesFold()
        folds.set(attemptId, fold)
        // Folding skips what is already in (a concurrent request may have read the same calls).
        return Effect.map(store.calls(attemptId, fold.lastSeq()), (calls) => {
          for (const call of calls) fold.add(call)
          return fold.recorded
        })
      })
  }
}
