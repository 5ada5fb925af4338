/**
 * Actor calls over one connection, both ways. All actors of two nodes share the connection: a
 * request names its actor, replies are matched by request id (ids are unique per process).
 *
 * As a caller, a channel encodes the request with the rpc's schemas and decodes what comes back
 * into the same `FromServer` messages a local actor would deliver. As a callee, it decodes the
 * request and writes it to the local `ActorHost` like any local caller; replies are encoded on the
 * way out. When the connection drops, every call pending on it fails at once with
 * `ActorUnavailable` and every call it made here is interrupted: nothing hangs.
 */
import * as Headers from "@effect/platform/Headers"
import type * as Rpc from "@effect/rpc/Rpc"
import type { FromServer, Request } from "@effect/rpc/RpcMessage"
import { RequestId } from "@effect/rpc/RpcMessage"
import { Cause, Effect, Either, Exit, type ParseResult, Runtime } from "effect"
import * as Codec from "./Codec.js"
import {
  ActorDefect,
  type ActorError,
  ActorNotFound,
  ActorUnavailable,
  InvalidMessage,
  isActorError,
  type UnavailableReason,
  UnknownMessage
} from "../errors.js"
import type { ActorHost, Deliver } from "../Host.js"
import type { Connection } from "./Transport.js"
import { Kind } from "./Wire.js"

/** The caller's side of a channel (what `ActorSystem` routes remote calls to). */
export interface Channel {
  readonly node: string
  readonly request: (actor: string, rpc: Rpc.Any, message: Request<any>, deliver: Deliver) => Effect.Effect<void, ActorError>
  readonly ack: (actor: string, requestId: RequestId) => Effect.Effect<void>
  readonly interrupt: (actor: string, requestId: RequestId) => Effect.Effect<void>
}

interface Serving {
  readonly actor: string
  readonly codec: Codec.RpcCodec
}

interface Pending extends Serving {
  readonly requestId: RequestId
  readonly deliver: Deliver
}

export interface ChannelOptions {
  readonly self: string
  /** The actors of this node, by name. */
  readonly local: (name: string) => ActorHost | undefined
  /** Runs the effects frame handlers produce (frame handlers are plain callbacks). */
  readonly runtime: Runtime.Runtime<never>
}

/**
 * Runs effects one after another on one fiber, started when work arrives: under load a single
 * fiber serves a whole burst of frames, instead of a fiber per frame. Only effects that never
 * wait for long belong here (writes to hosts, completed replies); order is preserved.
 */
const serialRunner = (runtime: Runtime.Runtime<never>) => {
  const queue: Array<Effect.Effect<void>> = []
  let running = false
  const next = () => queue.shift()!.pipe(Effect.catchAllCause((cause) => Effect.logError("reins: frame handler failed", cause)))
  const pump: Effect.Effect<void> = Effect.whileLoop({ while: () => queue.length > 0, body: next, step: () => {} }).pipe(
    Effect.ensuring(Effect.sync(() => {
      running = false
      if (queue.length > 0) start()
    }))
  )
  const start = () => {
    running = true
    Runtime.runFork(runtime)(pump)
  }
  return (effect: Effect.Effect<void>) => {
    // `Effect.void` is what an already-completed delivery returns: nothing left to run
    if (effect === Effect.void) return
    queue.push(effect)
    if (!running) start()
  }
}

export const make = (connection: Connection, options: ChannelOptions) => {
  const node = connection.peer.id
  const run = serialRunner(options.runtime)
  /** Stream chunks may wait for a slow consumer: never on the serial runner. */
  const fork = (effect: Effect.Effect<void>) => {
    if (effect !== Effect.void) Runtime.runFork(options.runtime)(effect)
  }
  const pending = new Map<number, Pending>()
  const serving = new Map<number, Serving>()
  const clientIds = new Map<ActorHost, number>()

  // ---- caller side -------------------------------------------------------------------------

  const unavailable = (actor: string, reason: UnavailableReason) => new ActorUnavailable({ actor, node, reason })

  const request: Channel["request"] = (actor, rpc, message, deliver) =>
    Effect.suspend((): Effect.Effect<void, ActorError> => {
      const codec = Codec.forRpc(rpc)
      const payload = codec.encodePayload(message.payload)
      if (Either.isLeft(payload)) {
        return Effect.fail(new InvalidMessage({ actor, tag: codec.tag, detail: Codec.describe(payload.left) }))
      }
      const id = Number(message.id)
      const headers = Object.entries(message.headers)
      const frame = headers.length === 0
        ? [Kind.Request, actor, id, codec.tag, payload.right]
        : [Kind.Request, actor, id, codec.tag, payload.right, headers]
      pending.set(id, { actor, codec, requestId: message.id, deliver })
      const sent = connection.send(frame)
      if (sent === "ok") return Effect.void
      pending.delete(id)
      return sent === "closed"
        ? Effect.fail(unavailable(actor, "disconnected"))
        : Effect.fail(new InvalidMessage({ actor, tag: codec.tag, detail: "the message is larger than the peer's frame limit" }))
    })

  const control = (kind: number) => (actor: string, requestId: RequestId) =>
    Effect.sync(() => {
      const id = Number(requestId)
      if (kind === Kind.Interrupt) pending.delete(id)
      connection.send([kind, actor, id])
    })

  /** The last reply to a call: `f` turns it into what the caller gets. */
  const reply = (id: number, f: (p: Pending) => FromServer<any>) => {
    const p = pending.get(id)
    if (p === undefined) return
    pending.delete(id)
    run(p.deliver(f(p)))
  }

  const exitWith = (p: Pending, exit: Exit.Exit<unknown, unknown>): FromServer<any> => ({
    _tag: "Exit",
    clientId: 0,
    requestId: p.requestId,
    exit: exit as any
  })

  const invalid = (p: Pending, detail: string) =>
    exitWith(p, Exit.fail(new InvalidMessage({ actor: p.actor, tag: p.codec.tag, detail })))

  const invalidReply = (p: Pending, error: ParseResult.ParseError) => invalid(p, `reply: ${Codec.describe(error)}`)

  /** What the caller gets for a reply: its `Exit`, or `InvalidMessage` if it does not decode. */
  const decoded = <A>(p: Pending, value: Either.Either<A, ParseResult.ParseError>, toExit: (a: A) => Exit.Exit<unknown, unknown>) =>
    Either.isLeft(value) ? invalidReply(p, value.left) : exitWith(p, toExit(value.right))

  const onReply = (frame: ReadonlyArray<unknown>) => {
    const id = frame[1] as number
    switch (frame[0]) {
      case Kind.Chunk: {
        const p = pending.get(id)
        if (p === undefined) return
        const values = p.codec.decodeChunk(frame[2])
        if (Either.isLeft(values) || values.right.length === 0) {
          pending.delete(id)
          connection.send([Kind.Interrupt, p.actor, id])
          return run(p.deliver(Either.isLeft(values) ? invalidReply(p, values.left) : invalid(p, "empty chunk")))
        }
        return fork(p.deliver({ _tag: "Chunk", clientId: 0, requestId: p.requestId, values: values.right as any }))
      }
      case Kind.ExitOk:
        return reply(id, (p) => (p.codec.isStream ? exitWith(p, Exit.void) : decoded(p, p.codec.decodeSuccess(frame[2]), Exit.succeed)))
      case Kind.Exit:
        return reply(id, (p) => decoded(p, p.codec.decodeExit(frame[2]), (exit) => exit))
      case Kind.Error:
        return reply(id, (p) => decoded(p, Codec.decodeActorError(frame[2]), Exit.fail))
    }
  }

  // ---- callee side -------------------------------------------------------------------------

  const sendError = (id: number, error: ActorError) => {
    const encoded = Codec.encodeActorError(error)
    if (Either.isRight(encoded)) connection.send([Kind.Error, id, encoded.right])
  }

  const sendDefect = (id: number, s: Serving, defect: string) => sendError(id, new ActorDefect({ actor: s.actor, defect }))

  /** Encodes what a local actor delivers for the remote caller. */
  const sink = (message: FromServer<any>): Effect.Effect<void> =>
    Effect.sync(() => {
      if (message._tag !== "Chunk" && message._tag !== "Exit") return
      const id = Number(message.requestId)
      const s = serving.get(id)
      if (s === undefined) return
      if (message._tag === "Chunk") {
        const values = s.codec.encodeChunk(message.values)
        if (Either.isLeft(values)) {
          serving.delete(id)
          return sendDefect(id, s, `reply does not match the schema: ${Codec.describe(values.left)}`)
        }
        if (connection.send([Kind.Chunk, id, values.right]) === "too-large") {
          serving.delete(id)
          sendDefect(id, s, "a reply chunk is larger than the frame limit")
        }
        return
      }
      serving.delete(id)
      const exit = message.exit as Exit.Exit<unknown, unknown>
      if (exit._tag === "Success") {
        const value = s.codec.isStream ? Either.right(null) : s.codec.encodeSuccess(exit.value)
        if (Either.isLeft(value)) return sendDefect(id, s, `reply does not match the schema: ${Codec.describe(value.left)}`)
        if (connection.send([Kind.ExitOk, id, value.right]) === "too-large") sendDefect(id, s, "the reply is larger than the frame limit")
        return
      }
      const failure = Cause.failureOption(exit.cause)
      if (failure._tag === "Some" && isActorError(failure.value)) return sendError(id, failure.value)
      const encoded = s.codec.encodeExit(exit)
      if (Either.isLeft(encoded)) return sendDefect(id, s, `error does not match the schema: ${Codec.describe(encoded.left)}`)
      connection.send([Kind.Exit, id, encoded.right])
    })

  const clientIdFor = (host: ActorHost) => {
    const id = clientIds.get(host) ?? host.connect(sink)
    clientIds.set(host, id)
    return id
  }

  const onRequest = (frame: ReadonlyArray<unknown>) => {
    const [, actor, id, tag, payload, headers] = frame
    if (typeof actor !== "string" || typeof id !== "number" || !Number.isSafeInteger(id) || typeof tag !== "string") {
      throw new Error("malformed request")
    }
    const host = options.local(actor)
    if (host === undefined) return sendError(id, new ActorNotFound({ actor, node: options.self }))
    const rpc = host.group.requests.get(tag)
    if (rpc === undefined) return sendError(id, new UnknownMessage({ actor, tag }))
    const codec = Codec.forRpc(rpc)
    const decoded = codec.decodePayload(payload)
    if (Either.isLeft(decoded)) return sendError(id, new InvalidMessage({ actor, tag, detail: Codec.describe(decoded.left) }))
    serving.set(id, { actor, codec })
    run(
      host.write(clientIdFor(host), {
        _tag: "Request",
        id: RequestId(BigInt(id)),
        tag,
        payload: decoded.right,
        headers: Array.isArray(headers) ? Headers.fromInput(headers as Array<[string, string]>) : Headers.empty
      } as Request<any>)
    )
  }

  const onControl = (frame: ReadonlyArray<unknown>) => {
    const [kind, actor, id] = frame
    if (typeof actor !== "string" || typeof id !== "number") throw new Error("malformed control frame")
    const host = options.local(actor)
    if (host === undefined) return
    const clientId = clientIds.get(host)
    if (clientId === undefined) return
    const requestId = RequestId(BigInt(id))
    if (kind === Kind.Interrupt) serving.delete(id)
    run(
      host.write(
        clientId,
        kind === Kind.Ack ? { _tag: "Ack", requestId } : { _tag: "Interrupt", requestId, interruptors: [] }
      )
    )
  }

  /** Handles a call frame; returns false if the frame is not a call frame. */
  const onFrame = (frame: ReadonlyArray<unknown>): boolean => {
    switch (frame[0]) {
      case Kind.Request:
        onRequest(frame)
        return true
      case Kind.Ack:
      case Kind.Interrupt:
        onControl(frame)
        return true
      case Kind.Chunk:
      case Kind.ExitOk:
      case Kind.Exit:
      case Kind.Error:
        onReply(frame)
        return true
      default:
        return false
    }
  }

  /** The connection is gone: fail what we wait for, interrupt what we serve. */
  const onClose = (reason: UnavailableReason) => {
    for (const [id, p] of pending) {
      pending.delete(id)
      run(p.deliver(exitWith(p, Exit.fail(unavailable(p.actor, reason)))))
    }
    serving.clear()
    for (const [host, clientId] of clientIds) run(host.disconnect(clientId))
    clientIds.clear()
  }

  const channel: Channel = {
    node,
    request,
    ack: control(Kind.Ack),
    interrupt: control(Kind.Interrupt)
  }
  return { channel, onFrame, onClose }
}
