/**
 * Reads a JSON request body with a size limit and strict UTF-8. An oversized body gets a 413
 * (the rest of it is read and discarded so the client sees the answer, then the connection
 * closes); invalid UTF-8 and malformed JSON get a 400.
 */
import { HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import { type ApiError, invalidJson, invalidUtf8, tooLarge } from "./errors.js"

/** Discard at most this much beyond the limit before giving up on the connection. */
const DISCARD_LIMIT = 64 * 1024 * 1024

const readBytes = (limit: number): Effect.Effect<Buffer, ApiError, HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const declared = Number(request.headers["content-length"] ?? NaN)
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    if (declared > limit) {
      source.resume() // drain without keeping
      return Effect.fail(tooLarge(limit))
    }
    return Effect.async<Buffer, ApiError>((resume) => {
      const parts: Array<Buffer> = []
      let size = 0
      let over = false
      const onData = (chunk: Buffer) => {
        size += chunk.length
        if (size > limit) {
          if (!over) {
            over = true
            parts.length = 0
            resume(Effect.fail(tooLarge(limit)))
          }
          if (size > limit + DISCARD_LIMIT) source.destroy()
          return
        }
        parts.push(chunk)
      }
      const onEnd = () => {
        if (!over) resume(Effect.succeed(Buffer.concat(parts, size)))
      }
      const onError = (e: Error) => {
        if (!over) resume(Effect.fail(invalidJson(`the body could not be read: ${e.message}`)))
      }
      source.on("data", onData)
      source.once("end", onEnd)
      source.once("error", onError)
      return Effect.sync(() => {
        source.off("data", onData)
        source.off("end", onEnd)
        source.off("error", onError)
      })
    })
  })

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The body as text and parsed (any JSON value; the route's schema decides what is acceptable). */
export const readJsonText = (limit: number): Effect.Effect<{ readonly text: string; readonly json: unknown }, ApiError, HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(readBytes(limit), (bytes) => {
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      return Effect.fail(invalidUtf8())
    }
    if (text.trim() === "") return Effect.fail(invalidJson("the body is empty"))
    try {
      return Effect.succeed({ text, json: JSON.parse(text) as unknown })
    } catch (e) {
      return Effect.fail(invalidJson((e as Error).message))
    }
  })

/** The parsed body (any JSON value; the route's schema decides what is acceptable). */
export const readJson = (limit: number): Effect.Effect<unknown, ApiError, HttpServerRequest.HttpServerRequest> =>
  Effect.map(readJsonText(limit), (body) => body.json)
