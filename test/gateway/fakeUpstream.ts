/**
 * A small OpenAI-compatible server for the upstream (proxy) tests: no real external model can
 * run here, so this speaks the real wire protocol (JSON and SSE chat/text completions, vLLM's
 * `return_token_ids`, logprobs, OpenAI error bodies) with deterministic answers.
 *
 * Reply: "echo: <last user text>" — or, when tools are given and the last user text contains
 * "weather", a `get_weather` tool call. Token ids are the UTF-16 code units of the text.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export interface FakeUpstream {
  readonly url: string
  readonly requests: Array<{ path: string; body: any; headers: IncomingMessage["headers"] }>
  readonly close: () => Promise<void>
}

const ids = (s: string) => Array.from(s, (c) => c.charCodeAt(0))

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const parts: Array<Buffer> = []
    req.on("data", (c: Buffer) => parts.push(c))
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")))
    req.on("error", reject)
  })

const lastUser = (messages: Array<any>) => {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]?.role === "user") return String(messages[i].content)
  return ""
}

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

export const startFakeUpstream = async (options: { model?: string; delayMs?: number } = {}): Promise<FakeUpstream> => {
  const model = options.model ?? "fake-model"
  const requests: FakeUpstream["requests"] = []
  const server: Server = createServer(async (req, res) => {
    const raw = req.method === "POST" ? await readBody(req) : ""
    const body = raw ? JSON.parse(raw) : null
    const path = (req.url ?? "").replace(/\?.*$/, "")
    requests.push({ path, body, headers: req.headers })
    if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs))
    if (req.method === "GET" && path === "/v1/models") return send(res, 200, { object: "list", data: [{ id: model, object: "model", created: 1, owned_by: "fake" }] })
    if (req.method !== "POST" || (path !== "/v1/chat/completions" && path !== "/v1/completions")) {
      return send(res, 404, { error: { message: `no route ${path}`, type: "invalid_request_error", code: null, param: null } })
    }
    if (body.model !== model) return send(res, 404, { error: { message: `The model \`${body.model}\` does not exist.`, type: "invalid_request_error", code: "model_not_found", param: "model" } })
    const chat = path === "/v1/chat/completions"
    const prompt = chat ? JSON.stringify(body.messages).slice(0, 40) : String(body.prompt).slice(0, 40)
    const toolCall = chat && body.tools?.length && lastUser(body.messages).includes("weather")
    const text = toolCall ? "" : `echo: ${chat ? lastUser(body.messages) : body.prompt}`
    const calls = toolCall ? [{ id: "call_up_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] : undefined
    const outIds = ids(toolCall ? '<tool_call>{"name":"get_weather"}</tool_call>' : text)
    const withIds = body.return_token_ids === true
    const logprobs = (n: number) => (chat ? { content: Array.from({ length: n }, (_, i) => ({ token: "x", logprob: -0.01 * (i + 1), bytes: [120], top_logprobs: [] })) } : { tokens: [], token_logprobs: Array.from({ length: n }, (_, i) => -0.01 * (i + 1)), top_logprobs: null, text_offset: [] })
    const finish = toolCall ? "tool_calls" : "stop"
    const usage = { prompt_tokens: prompt.length, completion_tokens: outIds.length, total_tokens: prompt.length + outIds.length }
    const head = { id: chat ? "chatcmpl-fake" : "cmpl-fake", created: 1, model }
    if (!body.stream) {
      const choice = chat
        ? { index: 0, message: { role: "assistant", content: toolCall ? null : text, ...(calls ? { tool_calls: calls } : {}) }, logprobs: body.logprobs ? logprobs(outIds.length) : null, finish_reason: finish, ...(withIds ? { token_ids: outIds } : {}) }
        : { index: 0, text, logprobs: body.logprobs ? logprobs(outIds.length) : null, finish_reason: finish, ...(withIds ? { token_ids: outIds } : {}) }
      return send(res, 200, { ...head, object: chat ? "chat.completion" : "text_completion", choices: [choice], usage, ...(withIds ? { prompt_token_ids: ids(prompt) } : {}) })
    }
    res.writeHead(200, { "content-type": "text/event-stream" })
    const obj = chat ? "chat.completion.chunk" : "text_completion"
    const event = (x: unknown) => res.write(`data: ${JSON.stringify(x)}\n\n`)
    if (chat) event({ ...head, object: obj, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }], ...(withIds ? { prompt_token_ids: ids(prompt) } : {}) })
    const pieces = toolCall ? [] : text.match(/.{1,3}/gs) ?? []
    let at = 0
    for (const piece of pieces) {
      const pieceIds = outIds.slice(at, at + piece.length)
      at += piece.length
      const lp = body.logprobs ? logprobs(piece.length) : null
      event({ ...head, object: obj, choices: [chat ? { index: 0, delta: { content: piece }, logprobs: lp, finish_reason: null, ...(withIds ? { token_ids: pieceIds } : {}) } : { index: 0, text: piece, logprobs: lp, finish_reason: null, ...(withIds ? { token_ids: pieceIds } : {}) }], ...(!chat && withIds && at === piece.length ? { prompt_token_ids: ids(prompt) } : {}) })
    }
    if (toolCall) event({ ...head, object: obj, choices: [{ index: 0, delta: { tool_calls: calls!.map((c, index) => ({ index, ...c })) }, logprobs: body.logprobs ? logprobs(outIds.length) : null, finish_reason: null, ...(withIds ? { token_ids: outIds } : {}) }] })
    event({ ...head, object: obj, choices: [chat ? { index: 0, delta: {}, finish_reason: finish } : { index: 0, text: "", finish_reason: finish }] })
    if (body.stream_options?.include_usage) event({ ...head, object: obj, choices: [], usage })
    res.end("data: [DONE]\n\n")
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}
