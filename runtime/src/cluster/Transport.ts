/**
 * The node's one port: a plain `node:http` server whose `/reins` path upgrades to a websocket
 * (`ws`), plus the dialer for outgoing connections. Either way a connection is only handed out
 * after the handshake (see Handshake.ts); until then frames are limited to a few KiB and must
 * arrive within `HANDSHAKE_TIMEOUT_MS`.
 *
 * What protects the node: HTTP garbage is answered 400 and dropped by node's parser; a frame over
 * `maxFrameBytes` makes `ws` close that connection (1009); a frame that is not a reins frame, or
 * that its handler chokes on, closes that connection (1007/1011). Nothing here throws past a
 * socket: one bad peer never takes the node down.
 */
import { Effect, Either, type Redacted } from "effect"
import http from "node:http"
import type { Duplex } from "node:stream"
import { WebSocket, WebSocketServer } from "ws"
import { ClusterConnectError, NodeStartError } from "../errors.js"
import * as Handshake from "./Handshake.js"
import * as Wire from "./Wire.js"

export const HANDSHAKE_TIMEOUT_MS = 5_000

/** Frames are batched into one websocket message up to this size. */
const MAX_BATCH_BYTES = 256 * 1024

export type SendResult = "ok" | "closed" | "too-large"

export interface ConnectionHandlers {
  readonly onFrame: (frame: Wire.Frame) => void
  readonly onClose: (code: number, reason: string) => void
}

/** An authenticated websocket to a peer. */
export interface Connection {
  readonly peer: Handshake.PeerInfo
  /** True when this side dialed. */
  readonly dialed: boolean
  /** The peer's socket address, for logs. */
  readonly remote: string
  readonly isOpen: () => boolean
  readonly send: (frame: Wire.Frame) => SendResult
  /** Closes now: `onClose` runs at once, the socket is torn down shortly after. */
  readonly close: (code: number, reason: string) => void
  /** Installs the handlers; frames that arrived before are replayed first. */
  readonly listen: (handlers: ConnectionHandlers) => void
}

export interface Logs {
  readonly warn: (message: string) => void
}

const makeConnection = (
  ws: WebSocket,
  peer: Handshake.PeerInfo,
  dialed: boolean,
  remote: string,
  maxFrameBytes: number,
  logs: Logs
): Connection & { readonly receive: (data: unknown, isBinary: boolean) => void } => {
  let handlers: ConnectionHandlers | undefined
  const early: Array<Wire.Frame> = []
  let closed: { code: number; reason: string } | undefined
  const fireClose = (code: number, reason: string) => {
    if (closed) return
    closed = { code, reason }
    handlers?.onClose(code, reason)
  }
  // Frames sent in one turn of the event loop go out as one websocket message (see Wire.ts), up
  // to a size that keeps batching cheap. Nothing bigger than the peer accepts is ever sent.
  const sendLimit = Math.min(maxFrameBytes, peer.maxFrameBytes ?? maxFrameBytes)
  const batchLimit = Math.min(sendLimit, MAX_BATCH_BYTES)
  const outbox: Array<Uint8Array> = []
  let outboxBytes = 0
  let flushScheduled = false
  const sendOutbox = () => {
    if (outbox.length === 0) return
    const message = outbox.length === 1 ? outbox[0]! : Buffer.concat(outbox, outboxBytes)
    outbox.length = 0
    outboxBytes = 0
    if (ws.readyState === WebSocket.OPEN) ws.send(message)
  }
  const endOfTurn = () => {
    flushScheduled = false
    sendOutbox()
  }
  const close = (code: number, reason: string) => {
    sendOutbox() // what was sent before closing (a Leave, final replies) still goes out
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) {
      ws.close(code, reason.slice(0, 120))
      // a dead peer never answers the closing handshake: do not keep the socket for 30 s
      setTimeout(() => ws.terminate(), 1_000).unref()
    }
    fireClose(code, reason)
  }
  const violation = (code: number, reason: string) => {
    logs.warn(`closing connection from ${peer.id} (${remote}): ${reason}`)
    close(code, reason)
  }
  // Every frame goes through the same guard: a handler that throws closes the connection (1011).
  // Delivery stops when a handler closes it, except for frames a peer sent before it closed and
  // that waited for `listen` (its last frames, a Leave, still count).
  const deliver = (h: ConnectionHandlers, frames: ReadonlyArray<Wire.Frame>, stopWhenClosed: boolean) => {
    for (const frame of frames) {
      if (stopWhenClosed && closed) return
      try {
        h.onFrame(frame)
      } catch (error) {
        return violation(1011, `bad frame ${String(frame[0])}: ${(error as Error).message}`)
      }
    }
  }
  ws.on("close", (code, reason) => fireClose(code, reason.toString()))
  // ws reports an oversized or malformed websocket frame here, then closes (1009/1002)
  ws.on("error", (error) => logs.warn(`closing connection from ${peer.id} (${remote}): ${error.message}`))
  return {
    peer,
    dialed,
    remote,
    isOpen: () => closed === undefined && ws.readyState === WebSocket.OPEN,
    send: (frame) => {
      if (closed !== undefined || ws.readyState !== WebSocket.OPEN) return "closed"
      const bytes = Wire.encode(frame)
      if (bytes.byteLength > sendLimit) return "too-large"
      if (!flushScheduled) {
        // the first frame of a turn goes at once (no added latency); the rest of the turn batches
        flushScheduled = true
        setImmediate(endOfTurn)
        ws.send(bytes)
        return "ok"
      }
      if (outboxBytes + bytes.byteLength > batchLimit) sendOutbox()
      outbox.push(bytes)
      outboxBytes += bytes.byteLength
      return "ok"
    },
    close,
    listen: (h) => {
      handlers = h
      deliver(h, early.splice(0), closed === undefined)
      if (closed) h.onClose(closed.code, closed.reason)
    },
    receive: (data, isBinary) => {
      if (closed) return
      if (!isBinary) return violation(1003, "text frames are not part of the protocol")
      let frames: ReadonlyArray<Wire.Frame>
      try {
        frames = Wire.decodeAll(data as Uint8Array)
      } catch (error) {
        return violation(1007, (error as Error).message)
      }
      if (handlers === undefined) early.push(...frames)
      else deliver(handlers, frames, true)
    }
  }
}

export interface ServerOptions {
  readonly host: string
  readonly port: number
  readonly secret: Redacted.Redacted<string>
  /** This node as peers should see it (read at each handshake). */
  readonly self: () => Handshake.PeerInfo
  readonly maxFrameBytes: number
  readonly onConnection: (connection: Connection) => void
  /** A health line for `GET /health`. */
  readonly health: () => unknown
  readonly logs: Logs
}

const refuse = (ws: WebSocket, reason: string) => {
  if (ws.readyState === WebSocket.OPEN) {
    ws.send(Wire.encode([Wire.Kind.Refused, reason]))
    ws.close(4001, reason)
  }
  setTimeout(() => ws.terminate(), 1_000).unref()
}

/**
 * The server accepts messages up to `MAX_HANDSHAKE_FRAME_BYTES` until the peer has proved it
 * knows the secret, so a stranger cannot make the node buffer a 64 MiB message. `ws` has no
 * per-connection setting for this; its receiver keeps the limit in `_maxPayload` (ws 8.x, pinned).
 */
const raiseFrameLimit = (ws: WebSocket, maxFrameBytes: number): boolean => {
  const receiver = (ws as unknown as { _receiver?: { _maxPayload?: unknown } })._receiver
  if (receiver === undefined || typeof receiver._maxPayload !== "number") return false
  receiver._maxPayload = maxFrameBytes
  return true
}

/** The one frame of a handshake message, or undefined if it is not one. */
const handshakeFrame = (data: unknown, isBinary: boolean, maxBytes = Number.POSITIVE_INFINITY): Wire.Frame | undefined => {
  if (!isBinary || (data as Uint8Array).byteLength > maxBytes) return undefined
  try {
    return Wire.decode(data as Uint8Array)
  } catch {
    return undefined
  }
}

const accept = (options: ServerOptions, ws: WebSocket, remote: string) => {
  const hs = Handshake.challenge(options.secret, options.self())
  let connection: ReturnType<typeof makeConnection> | undefined
  let done = false
  const timer = setTimeout(() => {
    if (done) return
    done = true
    options.logs.warn(`refused connection from ${remote}: no handshake within ${HANDSHAKE_TIMEOUT_MS} ms`)
    refuse(ws, "handshake timeout")
  }, HANDSHAKE_TIMEOUT_MS)
  ws.on("error", (error) => {
    // before the handshake (after it, the connection reports errors); 'close' follows
    if (!connection) options.logs.warn(`dropping connection from ${remote}: ${error.message}`)
  })
  ws.on("close", () => clearTimeout(timer))
  ws.on("message", (data, isBinary) => {
    if (connection) return connection.receive(data, isBinary)
    if (done) return
    done = true
    clearTimeout(timer)
    const frame = handshakeFrame(data, isBinary, Wire.MAX_HANDSHAKE_FRAME_BYTES)
    const result = frame === undefined ? Either.left("malformed handshake") : hs.check(frame)
    if (Either.isLeft(result)) {
      options.logs.warn(`refused connection from ${remote}: ${result.left}`)
      return refuse(ws, result.left)
    }
    if (!raiseFrameLimit(ws, options.maxFrameBytes)) {
      options.logs.warn("cannot raise the websocket frame limit after the handshake (ws internals changed?)")
      return refuse(ws, "internal error")
    }
    ws.send(Wire.encode(result.right.welcome))
    connection = makeConnection(ws, result.right.peer, false, remote, options.maxFrameBytes, options.logs)
    options.onConnection(connection)
  })
  ws.send(Wire.encode(hs.frame))
}

/** Listens on `host:port` (port 0 picks a free one) until the scope closes. */
export const listen = (options: ServerOptions): Effect.Effect<{ readonly host: string; readonly port: number }, NodeStartError, import("effect").Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ server: http.Server; wss: WebSocketServer }, NodeStartError>((resume) => {
      const server = http.createServer((req, res) => {
        if (req.method === "GET" && req.url === "/health") {
          res.writeHead(200, { "content-type": "application/json" })
          res.end(JSON.stringify(options.health()))
          return
        }
        res.writeHead(426, { "content-type": "text/plain" })
        res.end(`reins node: connect with a websocket to ${Wire.PATH}\n`)
      })
      server.on("clientError", (_error, socket: Duplex) => {
        if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
        socket.destroy()
      })
      // Until a peer has authenticated it may only send handshake-sized messages (see `accept`).
      const wss = new WebSocketServer({ noServer: true, maxPayload: Wire.MAX_HANDSHAKE_FRAME_BYTES, perMessageDeflate: false })
      server.on("upgrade", (req, socket: Duplex, head) => {
        socket.on("error", () => socket.destroy())
        const path = (req.url ?? "").split("?")[0]
        if (path !== Wire.PATH) {
          socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\n\r\n")
          return
        }
        wss.handleUpgrade(req, socket, head, (ws) => accept(options, ws, `${req.socket.remoteAddress}:${req.socket.remotePort}`))
      })
      server.once("error", (error) =>
        resume(Effect.fail(new NodeStartError({ detail: `cannot listen on ${options.host}:${options.port}: ${error.message}` }))))
      server.listen(options.port, options.host, () => resume(Effect.succeed({ server, wss })))
    }),
    ({ server, wss }) =>
      Effect.async<void>((resume) => {
        for (const ws of wss.clients) ws.terminate()
        wss.close()
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  ).pipe(
    Effect.map(({ server }) => {
      const address = server.address()
      return { host: options.host, port: typeof address === "object" && address !== null ? address.port : options.port }
    })
  )

/** `ws://host:port` (or with an explicit path) → the URL of the reins endpoint. */
export const endpoint = (url: string): string => {
  const parsed = new URL(url)
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") throw new Error(`not a ws:// URL: ${url}`)
  if (parsed.pathname === "/" || parsed.pathname === "") parsed.pathname = Wire.PATH
  return parsed.toString()
}

export interface DialOptions {
  readonly secret: Redacted.Redacted<string>
  readonly self: Handshake.PeerInfo
  readonly maxFrameBytes: number
  readonly logs: Logs
}

/** Connects to a node and authenticates both ways. */
export const dial = (url: string, options: DialOptions): Effect.Effect<Connection, ClusterConnectError> =>
  Effect.try({
    try: () => endpoint(url),
    catch: (error) => new ClusterConnectError({ url, detail: (error as Error).message })
  }).pipe(Effect.flatMap((target) =>
    Effect.async<Connection, ClusterConnectError>((resume) => {
      const ws = new WebSocket(target, {
        maxPayload: options.maxFrameBytes,
        perMessageDeflate: false,
        handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
        // Client frames must carry a mask, but its job is to protect HTTP proxies from hostile
        // browser scripts; between two authenticated nodes an all-zero mask (which `ws` then
        // skips applying) saves a pass over every payload byte.
        generateMask: (mask) => void mask.fill(0)
      })
      let settled = false
      let check: ((frame: Wire.Frame) => Either.Either<Handshake.PeerInfo, string>) | undefined
      let connection: ReturnType<typeof makeConnection> | undefined
      const fail = (detail: string) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        ws.terminate()
        resume(Effect.fail(new ClusterConnectError({ url, detail })))
      }
      const timer = setTimeout(() => fail(`no handshake within ${HANDSHAKE_TIMEOUT_MS} ms`), HANDSHAKE_TIMEOUT_MS)
      ws.on("error", (error) => fail(error.message))
      ws.on("close", (code, reason) => fail(`closed by the server (${code} ${reason.toString()})`))
      ws.on("message", (data, isBinary) => {
        if (connection) return connection.receive(data, isBinary)
        if (settled) return
        const frame = handshakeFrame(data, isBinary)
        if (frame === undefined) return fail("the server does not speak the reins protocol")
        if (check === undefined) {
          const answered = Handshake.answer(options.secret, options.self, frame)
          if (Either.isLeft(answered)) return fail(answered.left)
          check = answered.right.check
          return ws.send(Wire.encode(answered.right.hello))
        }
        const peer = check(frame)
        if (Either.isLeft(peer)) return fail(peer.left)
        settled = true
        clearTimeout(timer)
        connection = makeConnection(ws, peer.right, true, target, options.maxFrameBytes, options.logs)
        resume(Effect.succeed(connection))
      })
      return Effect.sync(() => {
        if (!settled) {
          settled = true
          clearTimeout(timer)
          ws.terminate()
        }
      })
    })
  ))
