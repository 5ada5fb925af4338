/** The Responses API as relayed to an upstream that serves it (see calls/relay.ts). */
import type { RelayedProtocol } from "../calls/relay.js"
import { errorBody } from "../http/errors.js"

type Json = Record<string, any>

const FINAL = new Set(["response.completed", "response.incomplete", "response.failed"])

export const relayedResponses: RelayedProtocol = {
  path: "/responses",
  finishOf: (r: Json) =>
    r.status === "incomplete" ? "length" : ((r.output ?? []) as ReadonlyArray<Json>).some((o) => o?.type === "function_call") ? "tool_calls" : r.status === "completed" ? "stop" : null,
  gather: () => {
    let response: Json | null = null
    return {
      // The final event carries the whole response: it (and anything after) waits for the record.
      add: (data: Json) => {
        if (FINAL.has(data.type)) response = data.response ?? null
        return FINAL.has(data.type) || data.type === "error"
      },
      response: () => response
    }
  },
  errorBody,
  errorEvent: (e) => `event: error\ndata: ${JSON.stringify({ type: "error", sequence_number: 0, code: e.code, message: e.message, param: e.param })}\n\n`
}
