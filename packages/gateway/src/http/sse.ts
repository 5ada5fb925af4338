/** Server-sent events: OpenAI chat streams send `data: <json>\n\n` per chunk, then `data: [DONE]\n\n`. */
const encoder = new TextEncoder()

export const sse = (data: unknown): Uint8Array => encoder.encode(`data: ${JSON.stringify(data)}\n\n`)

export const DONE: Uint8Array = encoder.encode("data: [DONE]\n\n")

export const SSE_HEADERS = {
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-accel-buffering": "no"
} as const

/** A named event (`event: <name>`), as the Responses and Messages streams send them. */
export const namedSse = (event: string, data: unknown): Uint8Array => encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
