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

export const badRequest = (message: string, param: string | null = null, code: string | null = "invalid_value") =>
  invalid(400, message, code, param)

export const invalidJson = (detail: string) =>
  invalid(400, `We could not parse the JSON body of your request (${detail}). The body must be one JSON object, UTF-8 encoded.`, "invalid_json")

export const invalidUtf8 = () => invalid(400, "The request body is not valid UTF-8.", "invalid_encoding")

export const unknownParameter = (name: string) =>
  invalid(400, `Unrecognized request argument supplied: ${name}`, "unknown_parameter", name)

export const unsupported = (message: string, param: string) => invalid(400, message, "unsupported_value", param)

export const tooLarge = (limit: number) =>
  new ApiError({
    status: 413,
    message: `The request body is larger than the limit of ${limit} bytes.`,
    type: "invalid_request_error",
    code: "request_too_large",
    param: null,
    headers: { connection: "close" }
  })

export const unauthorized = (message = "Incorrect API key provided. Use the attempt key as `Authorization: Bearer <key>` or `x-api-key`.") =>
  new ApiError({ status: 401, message, type: "authentication_error", code: "invalid_api_key", param: null })

export const adminUnauthorized = () =>
  new ApiError({
    status: 401,
    message: "This route needs the admin token (`Authorization: Bearer <REINS_ADMIN_TOKEN>`).",
    type: "authentication_error",
    code: "invalid_admin_token",
    param: null
  })

export const sessionExpired = () =>
  new ApiError({
    status: 401,
    message: "The dashboard session has expired or is no longer valid (the admin token changed); log in again at /ui.",
    type: "authentication_error",
    code: "session_expired",
    param: null
  })

export const crossOrigin = () =>
  new ApiError({
    status: 403,
    message: "A dashboard request that changes something must come from the dashboard's own page.",
    type: "permission_error",
    code: "cross_origin",
    param: null
  })

export const sessionReadOnly = () =>
  new ApiError({
    status: 403,
    message: "The dashboard is read-only except pausing and resuming the Gateway; this route needs the admin token (`Authorization: Bearer <REINS_ADMIN_TOKEN>`).",
    type: "permission_error",
    code: "dashboard_read_only",
    param: null
  })

export const attemptFinished = (attemptId: string, state: string) =>
  new ApiError({
    status: 409,
    message: `Attempt ${attemptId} is ${state}; its key no longer accepts calls.`,
    type: "invalid_request_error",
    code: "attempt_not_running",
    param: null
  })

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

export const conflict = (message: string, code = "conflict") =>
  new ApiError({ status: 409, message, type: "invalid_request_error", code, param: null })

export const heldTooLong = (seconds: number, retryAfter: number) =>
  new ApiError({
    status: 503,
    message: `The gateway has been paused for a weight update for longer than the ${seconds} s a call may wait. Retry shortly.`,
    type: "server_error",
    code: "gateway_paused",
    param: null,
    headers: { "retry-after": String(retryAfter) }
  })

export const shuttingDown = () =>
  new ApiError({
    status: 503,
    message: "The gateway is shutting down. Retry shortly.",
    type: "server_error",
    code: "gateway_shutting_down",
    param: null,
    headers: { "retry-after": "5" }
  })

export const upstreamError = (message: string) =>
  new ApiError({ status: 502, message, type: "server_error", code: "upstream_error", param: null })

export const internal = (message: string) =>
  new ApiError({ status: 500, message, type: "server_error", code: "internal_error", param: null })

export const errorBody = (e: ApiError) => ({ error: { message: e.message, type: e.type, code: e.code, param: e.param } })

export const toResponse = (e: ApiError): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(errorBody(e), { status: e.status, headers: e.headers ?? {} })
