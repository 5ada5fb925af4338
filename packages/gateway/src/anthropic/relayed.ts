/** Anthropic Messages as relayed to an upstream that serves it (see calls/relay.ts). */
import type { RelayedProtocol } from "../calls/relay.js"
import { anthropicErrorBody } from "./errors.js"

type Json = Record<string, any>

/** The message a stream builds, event by event (what is recorded). */
const messageOfStream = () => {
  let message: Json | null = null
  const partialJson = new Map<number, string>()
  const add = (data: Json): boolean => {
    const blocks = (message?.content ?? []) as Array<Json>
    switch (data.type) {
      case "message_start":
        message = structuredClone(data.message ?? {})
        message!.content ??= []
        return false
      case "content_block_start":
        blocks[data.index] = structuredClone(data.content_block ?? {})
        return false
      case "content_block_delta": {
        const block = blocks[data.index]
        const d = data.delta ?? {}
        if (block === undefined) return false
        if (d.type === "text_delta") block.text = (block.text ?? "") + d.text
        else if (d.type === "thinking_delta") block.thinking = (block.thinking ?? "") + d.thinking
        else if (d.type === "signature_delta") block.signature = d.signature
        else if (d.type === "input_json_delta") partialJson.set(data.index, (partialJson.get(data.index) ?? "") + d.partial_json)
        return false
      }
      case "content_block_stop": {
        const json = partialJson.get(data.index)
        if (json !== undefined && blocks[data.index] !== undefined) {
          try {
            blocks[data.index]!.input = JSON.parse(json === "" ? "{}" : json)
          } catch {
            blocks[data.index]!.input = {}
          }
        }
        return false
      }
      case "message_delta":
        if (message !== null) {
          Object.assign(message, data.delta ?? {})
          message.usage = { ...(message.usage ?? {}), ...(data.usage ?? {}) }
        }
        // The stop reason is the answer's end: it and what follows wait for the record.
        return true
      default:
        return data.type === "message_stop" || data.type === "error"
    }
  }
  return { add, response: () => message }
}

export const relayedMessages: RelayedProtocol = {
  path: "/messages",
  finishOf: (m: Json) => (m.stop_reason === "tool_use" ? "tool_calls" : m.stop_reason === "max_tokens" ? "length" : m.stop_reason == null ? null : "stop"),
  gather: messageOfStream,
  errorBody: anthropicErrorBody,
  errorEvent: (e) => `event: error\ndata: ${JSON.stringify(anthropicErrorBody(e))}\n\n`
}
