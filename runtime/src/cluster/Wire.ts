/**
 * The frames nodes exchange over their websocket: msgpack arrays `[kind, ...fields]`. A websocket
 * message carries one frame or, under load, several back to back (frames sent in the same turn of
 * the event loop are batched: fewer syscalls and websocket headers). Stateless (no msgpackr
 * records shared across frames), so every frame can be decoded on its own and a bad one is
 * rejected without poisoning the next. Binary fields (packed typed arrays) are msgpack `bin`.
 *
 *   handshake   [Challenge, version, serverNonce]   [Hello, clientNonce, proof, info]
 *               [Welcome, proof, info]               [Refused, reason]
 *   membership  [Gossip, members]                    [Leave]
 *   calls       [Request, actor, id, tag, payload, headers?]   [Ack, actor, id]   [Interrupt, actor, id]
 *   replies     [Chunk, id, values]   [ExitOk, id, value]   [Exit, id, exit]   [Error, id, actorError]
 */
import { Packr, Unpackr } from "msgpackr"

export const Kind = {
  Challenge: 0,
  Hello: 1,
  Welcome: 2,
  Refused: 3,
  Gossip: 10,
  Leave: 11,
  Request: 20,
  Ack: 21,
  Interrupt: 22,
  Chunk: 30,
  ExitOk: 31,
  Exit: 32,
  Error: 33
} as const

export const PROTOCOL_VERSION = 1

/** Largest frame a node accepts by default; bigger ones close the connection (64 MiB). */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024

/** Largest frame accepted before the handshake completes. */
export const MAX_HANDSHAKE_FRAME_BYTES = 4096

/** The websocket path nodes listen on. */
export const PATH = "/reins"

const packr = new Packr({ useRecords: false })
const unpackr = new Unpackr({ useRecords: false })

export type Frame = ReadonlyArray<unknown>

export const encode = (frame: Frame): Uint8Array => packr.pack(frame)

export class MalformedFrame extends Error {
  override readonly name = "MalformedFrame"
}

const check = (frame: unknown): Frame => {
  if (!Array.isArray(frame) || typeof frame[0] !== "number") throw new MalformedFrame("not a reins frame")
  return frame
}

const unpack = <A>(f: () => A): A => {
  try {
    return f()
  } catch (cause) {
    throw new MalformedFrame(`not msgpack: ${(cause as Error).message}`)
  }
}

/** Decodes a message of exactly one frame (the handshake); throws `MalformedFrame`. */
export const decode = (bytes: Uint8Array): Frame => check(unpack(() => unpackr.unpack(bytes)))

/** Decodes a message of one or more frames; throws `MalformedFrame` if any is bad. */
export const decodeAll = (bytes: Uint8Array): ReadonlyArray<Frame> => {
  const frames = unpack(() => unpackr.unpackMultiple(bytes) as Array<unknown>)
  if (frames.length === 0) throw new MalformedFrame("empty message")
  return frames.map(check)
}
