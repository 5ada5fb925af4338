/**
 * Mutual challenge–response authentication with the cluster secret (HMAC-SHA256); the secret
 * never travels. Pure functions over frames, so the exchange is testable without sockets:
 *
 *   server → client  [Challenge, version, serverNonce]
 *   client → server  [Hello, clientNonce, HMAC(secret, "client" | serverNonce | clientNonce | clientInfo), clientInfo]
 *   server → client  [Welcome, HMAC(secret, "server" | serverNonce | clientNonce | serverInfo), serverInfo]
 *
 * Each side proves it knows the secret over the other side's fresh nonce, so a recorded Hello or
 * Welcome is useless on another connection (nonces are single-use: one per connection), and the
 * "client"/"server" labels stop a proof from being reflected back. The peer info (id, roles...)
 * is covered by the proof, so it cannot be altered in transit.
 */
import { Either, Redacted, Schema } from "effect"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { Kind, PROTOCOL_VERSION } from "./Wire.js"

/** Who is on the other end of a connection. */
export const PeerInfo = Schema.Struct({
  id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)),
  /** When this process started (ms): a restarted node has the same id and a larger incarnation. */
  incarnation: Schema.Number,
  /** `client`: a tool such as `reins status`, never a member. */
  kind: Schema.Literal("node", "client"),
  /** The websocket URL other nodes reach it at ("" for clients). */
  address: Schema.String.pipe(Schema.maxLength(512)),
  roles: Schema.Array(Schema.String.pipe(Schema.maxLength(64))).pipe(Schema.maxItems(64)),
  /** The largest websocket message it accepts: peers never send it anything bigger. */
  maxFrameBytes: Schema.optional(Schema.Number)
})
export type PeerInfo = typeof PeerInfo.Type

const decodeInfo = Schema.decodeUnknownEither(PeerInfo)

const NONCE_BYTES = 32

const proof = (secret: Redacted.Redacted<string>, side: "client" | "server", serverNonce: Uint8Array, clientNonce: Uint8Array, info: PeerInfo) =>
  createHmac("sha256", Redacted.value(secret))
    .update(`reins/${PROTOCOL_VERSION}/${side}\n`)
    .update(serverNonce)
    .update(clientNonce)
    .update(JSON.stringify([info.id, info.incarnation, info.kind, info.address, info.roles, info.maxFrameBytes ?? 0]))
    .digest()

const isNonce = (u: unknown): u is Uint8Array => u instanceof Uint8Array && u.byteLength === NONCE_BYTES

const sameProof = (expected: Uint8Array, given: unknown) =>
  given instanceof Uint8Array && given.byteLength === expected.byteLength && timingSafeEqual(expected, given)

/** The peer's info, if `given` proves that it knows the secret (else why not). */
const verify = (
  secret: Redacted.Redacted<string>,
  side: "client" | "server",
  serverNonce: Uint8Array,
  clientNonce: Uint8Array,
  rawInfo: unknown,
  given: unknown,
  wrongSecret: string
): Either.Either<PeerInfo, string> => {
  const info = decodeInfo(rawInfo)
  if (Either.isLeft(info)) return Either.left("malformed peer info")
  if (!sameProof(proof(secret, side, serverNonce, clientNonce, info.right), given)) return Either.left(wrongSecret)
  return Either.right(info.right)
}

/** The server's side: send `frame`, then check the client's Hello. */
export const challenge = (secret: Redacted.Redacted<string>, self: PeerInfo) => {
  const serverNonce = randomBytes(NONCE_BYTES)
  let used = false
  return {
    frame: [Kind.Challenge, PROTOCOL_VERSION, serverNonce] as const,
    /** Left: why the client is refused. Right: who it is, and the Welcome to send. */
    check: (hello: ReadonlyArray<unknown>): Either.Either<{ readonly peer: PeerInfo; readonly welcome: ReadonlyArray<unknown> }, string> => {
      if (used) return Either.left("handshake already done")
      used = true
      if (hello[0] !== Kind.Hello) return Either.left("expected a Hello frame")
      const [, clientNonce, clientProof, rawInfo] = hello
      if (!isNonce(clientNonce)) return Either.left("malformed nonce")
      return Either.map(verify(secret, "client", serverNonce, clientNonce, rawInfo, clientProof, "wrong cluster secret"), (peer) => ({
        peer,
        welcome: [Kind.Welcome, proof(secret, "server", serverNonce, clientNonce, self), self]
      }))
    }
  }
}

/** The client's side: answer the server's Challenge, then check its Welcome. */
export const answer = (secret: Redacted.Redacted<string>, self: PeerInfo, challengeFrame: ReadonlyArray<unknown>) => {
  const [kind, version, serverNonce] = challengeFrame
  if (kind !== Kind.Challenge) return Either.left("expected a Challenge frame")
  if (version !== PROTOCOL_VERSION) return Either.left(`protocol version ${String(version)} (this node speaks ${PROTOCOL_VERSION})`)
  if (!isNonce(serverNonce)) return Either.left("malformed nonce")
  const clientNonce = randomBytes(NONCE_BYTES)
  return Either.right({
    hello: [Kind.Hello, clientNonce, proof(secret, "client", serverNonce, clientNonce, self), self] as ReadonlyArray<unknown>,
    check: (welcome: ReadonlyArray<unknown>): Either.Either<PeerInfo, string> => {
      if (welcome[0] === Kind.Refused) return Either.left(`refused: ${String(welcome[1])}`)
      if (welcome[0] !== Kind.Welcome) return Either.left("expected a Welcome frame")
      return verify(secret, "server", serverNonce, clientNonce, welcome[2], welcome[1], "the server does not know the cluster secret")
    }
  })
}
