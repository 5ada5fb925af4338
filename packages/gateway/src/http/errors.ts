/**
 * Every error the HTTP face returns, in OpenAI's shape:
 * `{"error": {"message", "type", "code", "param"}}` with the matching status.
 */
import { HttpServerResponse } from "@effect/platform"
import { Data } from "effect"

export class ApiError extends Data.TaggedError("ApiError")<{
  readonly status: number
  readonly message: string
  readonly type: string
  readonly code: string | null
  readonly param: string | null
  readonly headers?: Record<string, string>
  /** A context-length refusal's numbers, for protocols that word it their own way (Anthropic). */
  readonly context?: { readonly limit: number; readonly prompt: number; readonly completion: number | null }
}> {}

const invalid = (status: number, message: string, code: string | null, param: string | null = null) =>
  new ApiError({ status, message, type: "invalid_request_error", code, param })

/** An error no parameter is at fault for. */
const paramless = (status: number, type: string, code: string, message: string, headers?: Record<string, string>) =>
  new ApiError({ status, message, type, code, param: null, ...(headers !== undefined ? { headers } : {}) })

export const badRequest = (message: string, param: string | null = null, code: string | null = "invalid_value") =>
  invalid(400, message, code, param)

export const invalidJson = (detail: string) =>
  invalid(400, `We could not parse the JSON body of your request (${detail}). The body must be one JSON object, UTF-8 encoded.`, "invalid_json")

export const invalidUtf8 = () => invalid(400, "The request body is not valid UTF-8.", "invalid_encoding")

export const unknownParameter = (name: string) =>
  invalid(400, `Unrecognized request argument supplied: ${name}`, "unknown_parameter", name)

export const unsupported = (message: string, param: string) => invalid(400, message, "unsupported_value", param)

export const tooLarge = (limit: number) =>
  paramless(413, "invalid_request_error", "request_too_large", `The request body is larger than the limit of ${limit} bytes.`, { connection: "close" })

export const unauthorized = (message = "Incorrect API key provided. Use the attempt key as `Authorization: Bearer <key>` or `x-api-key`.") =>
  paramless(401, "authentication_error", "invalid_api_key", message)

export const adminUnauthorized = () =>
  paramless(401, "authentication_error", "invalid_admin_token", "This route needs the admin token (`Authorization: Bearer <REINS_ADMIN_TOKEN>`).")

export const sessionExpired = () =>
  paramless(401, "authentication_error", "session_expired", "The dashboard session has expired or is no longer valid (the admin token changed); log in again at /ui.")

export const crossOrigin = () =>
  paramless(403, "permission_error", "cross_origin", "A dashboard request that changes something must come from the dashboard's own page.")

export const sessionReadOnly = () =>
  paramless(
    403,
    "permission_error",
    "dashboard_read_only",
    "The dashboard is read-only except pausing and resuming the Gateway; this route needs the admin token (`Authorization: Bearer <REINS_ADMIN_TOKEN>`)."
  )

export const attemptFinished = (attemptId: string, state: string) =>
  paramless(409, "invalid_request_error", "attempt_not_running", `Attempt ${attemptId} is ${state}; its key no longer accepts calls.`)

export const modelNotFound = (model: string) =>
  invalid(404, `The model \`${model}\` does not exist or you do not have access to it.`, "model_not_found", "model")

export const notFound = (message: string, code = "not_found") => invalid(404, message, code)

export const unknownRoute = (method: string, path: string) => invalid(404, `Invalid URL (${method} ${path})`, "unknown_url")

export const contextLengthExceeded = (limit: number, prompt: number, completion: number | null) =>
  new ApiError({
    status: 400,
    type: "invalid_request_error",
    message:
      completion === null
        ? `This model's maximum context length is ${limit} tokens. However, your messages resulted in ${prompt} tokens. Please reduce the length of the messages.`
        : `This model's maximum context length is ${limit} tokens. However, you requested ${prompt + completion} tokens (${prompt} in the messages, ${completion} in the completion). Please reduce the length of the messages or completion.`,
    code: "context_length_exceeded",
    param: "messages",
    context: { limit, prompt, completion }
  })

export const conflict = (message: string, code = "conflict") => paramless(409, "invalid_request_error", code, message)

export const heldTooLong = (seconds: number, retryAfter: number) =>
  paramless(
    503,
    "server_error",
    "gateway_paused",
    `The gateway has been paused for a weight update for longer than the ${seconds} s a call may wait. Retry shortly.`,
    { "retry-after": String(retryAfter) }
  )

export const shuttingDown = () => paramless(503, "server_error", "gateway_shutting_down", "The gateway is shutting down. Retry shortly.", { "retry-after": "5" })

export const upstreamError = (message: string) => paramless(502, "server_error", "upstream_error", message)

export const internal = (message: string) => paramless(500, "server_error", "internal_error", message)

export const errorBody = (e: ApiError) => ({ error: { message: e.message, type: e.type, code: e.code, param: e.param } })

export const toResponse = (e: ApiError): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(errorBody(e), { status: e.status, headers: e.headers ?? {} })
