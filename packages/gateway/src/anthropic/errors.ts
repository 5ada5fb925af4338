/**
 * Errors in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}` with the status
 * the Gateway decided (401 for a bad key, 400, 404, 409 for an ended attempt, 413, 500, 503 for a
 * call held past the maximum). 529 (`overloaded_error`) is never sent: a paused Gateway holds
 * calls instead of refusing them.
 */
import { HttpServerResponse } from "@effect/platform"
import type { ApiError } from "../http/errors.js"

const typeOf = (e: ApiError): string => {
  switch (e.status) {
    case 400:
    case 409:
      return "invalid_request_error"
    case 401:
      return "authentication_error"
    case 403:
      return "permission_error"
    case 404:
      return "not_found_error"
    case 413:
      return "request_too_large"
    case 429:
      return "rate_limit_error"
    default:
      return "api_error"
  }
}

/** A context-length refusal in Anthropic's own words (what Messages harnesses look for). */
const contextMessage = ({ limit, prompt, completion }: NonNullable<ApiError["context"]>) =>
  completion === null
    ? `prompt is too long: ${prompt} tokens > ${limit} maximum`
    : `input length and \`max_tokens\` exceed context limit: ${prompt} + ${completion} > ${limit}, decrease input length or \`max_tokens\` and try again`

/** The message names the field, as OpenAI's `param` does. */
const messageOf = (e: ApiError): string => {
  if (e.context !== undefined) return contextMessage(e.context)
  return e.param !== null && !e.message.includes(e.param) ? `${e.param}: ${e.message}` : e.message
}

export const anthropicErrorBody = (e: ApiError) => ({ type: "error" as const, error: { type: typeOf(e), message: messageOf(e) } })

export const toAnthropicResponse = (e: ApiError): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(anthropicErrorBody(e), { status: e.status, headers: e.headers ?? {} })
