/**
 * The handshake, and what a node does with bad input on its port: garbage bytes, junk before and
 * after authentication, oversized frames, unknown actors and messages. The node must answer the
 * sender with a tagged error or close only that connection, and keep serving everyone else.
 */
import { describe, expect, it } from "@effect/vitest"
import { ActorSystem, Node } from "@reins/runtime"
import { Context, Effect, Either, Exit, Layer, Redacted, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import { WebSocket } from "ws"
import { testHandlers } from "./fixtures/handlers.js"
import { TestActor } from "./fixtures/protocol.js"
import { authenticated, clientInfo, Handshake, Transport, waitForFrame, Wire } from "./fixtures/wire.js"

const secret = Redacted.make("wire-test-secret-0123456789abcdef")
const other = Redacted.make("some-other-secret-0123456789abcdef")
const serverInfo: Handshake.PeerInfo = { id: "server", incarnation: 1, kind: "node", address: "ws://x:1", roles: ["gateway"] }

describe("handshake", () => {
  it("authenticates both sides with the shared secret", () => {
    const server = Handshake.challenge(secret, serverInfo)
    const client = Either.getOrThrow(Handshake.answer(secret, clientInfo("c1"), server.frame))
    const checked = Either.getOrThrow(server.check(client.hello))
    expect(checked.peer.id).toBe("c1")
    expect(Either.getOrThrow(client.check(checked.welcome))).toMatchObject({ id: "server", roles: ["gateway"] })
  })

  it("refuses a wrong secret, a replayed Hello, a reused challenge and altered peer info", () => {
    const server = Handshake.challenge(secret, serverInfo)
    const wrong = Either.getOrThrow(Handshake.answer(other, clientInfo(), server.frame))
    expect(server.check(wrong.hello)).toEqual(Either.left("wrong cluster secret"))

    // a Hello recorded on one connection is worthless on the next (fresh nonce)
    const first = Handshake.challenge(secret, serverInfo)
    const hello = Either.getOrThrow(Handshake.answer(secret, clientInfo(), first.frame)).hello
    expect(Either.isRight(first.check(hello))).toBe(true)
    expect(first.check(hello)).toEqual(Either.left("handshake already done"))
    expect(Handshake.challenge(secret, serverInfo).check(hello)).toEqual(Either.left("wrong cluster secret"))

    // the proof covers the peer info
    const third = Handshake.challenge(secret, serverInfo)
    const honest = Either.getOrThrow(Handshake.answer(secret, clientInfo(), third.frame)).hello
    const forged = [...honest.slice(0, 3), { ...(honest[3] as object), kind: "node", roles: ["trainer"] }]
    expect(third.check(forged)).toEqual(Either.left("wrong cluster secret"))
  })

  it("lets the client detect a server that does not know the secret", () => {
    const impostor = Handshake.challenge(other, serverInfo)
    const client = Either.getOrThrow(Handshake.answer(secret, clientInfo(), impostor.frame))
    // the impostor cannot compute the proof over the client's nonce
    const forged = [Wire.Kind.Welcome, new Uint8Array(32), serverInfo]
    expect(client.check(forged)).toEqual(Either.left("the server does not know the cluster secret"))
    expect(client.check([Wire.Kind.Refused, "wrong cluster secret"])).toEqual(Either.left("refused: wrong cluster secret"))
  })
})

const withNode = <A>(f: (address: string, system: ActorSystem["Type"]) => Promise<A>) =>
  Effect.gen(function*() {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-wire-"))
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Node.layer({ dataDir: dir, secret, maxFrameBytes: 64 * 1024 }, TestActor.toLayer(testHandlers("node"))),
      scope
    )
    const address = Context.get(context, Node.CurrentNode).address
    return yield* Effect.promise(() => f(address, Context.get(context, ActorSystem))).pipe(
      Effect.ensuring(Effect.zipRight(Scope.close(scope, Exit.void), Effect.sync(() => rmSync(dir, { recursive: true, force: true }))))
    )
  }).pipe(Effect.runPromise)

/** The node still answers a well-formed call. */
const stillServing = async (address: string) => {
  const { ws, frames } = await authenticated(address, secret)
  const id = Math.floor(Math.random() * 1e9)
  ws.send(Wire.encode([Wire.Kind.Request, "test", id, "Ping", undefined]))
  const reply = await waitForFrame(frames, (f) => f[1] === id)
  ws.close()
  return reply
}

describe("a node under bad input", () => {
  it("answers unknown actors, unknown messages and invalid payloads with tagged errors", () =>
    withNode(async (address) => {
      const { ws, frames } = await authenticated(address, secret)
      ws.send(Wire.encode([Wire.Kind.Request, "nobody", 1, "Ping", undefined]))
      ws.send(Wire.encode([Wire.Kind.Request, "test", 2, "Launch", undefined]))
      ws.send(Wire.encode([Wire.Kind.Request, "test", 3, "Echo", { ids: "not bytes", logprobs: 7 }]))
      ws.send(Wire.encode([Wire.Kind.Request, "test", 4, "Ping", undefined]))
      const byId = async (id: number) => waitForFrame(frames, (f) => f[1] === id)
      expect(await byId(1)).toMatchObject([Wire.Kind.Error, 1, { _tag: "ActorNotFound", actor: "nobody" }])
      expect(await byId(2)).toMatchObject([Wire.Kind.Error, 2, { _tag: "UnknownMessage", actor: "test", tag: "Launch" }])
      expect(await byId(3)).toMatchObject([Wire.Kind.Error, 3, { _tag: "InvalidMessage", actor: "test", tag: "Echo" }])
      expect(await byId(4)).toEqual([Wire.Kind.ExitOk, 4, "pong"])
      ws.close()
    }), 30_000)

  it("drops garbage bytes, junk before and after the handshake and oversized frames, one connection at a time", () =>
    withNode(async (address) => {
      const { port } = new URL(address)
      // plain TCP garbage: the HTTP parser refuses it and closes the socket
      const tcp = net.connect(Number(port), "127.0.0.1")
      tcp.on("error", () => {})
      const tcpClosed = new Promise<string>((done) => {
        let got = ""
        tcp.on("data", (d) => (got += d.toString()))
        tcp.on("close", () => done(got))
      })
      tcp.write(Buffer.from([0x00, 0xff, 0x13, 0x37, 0x0d, 0x0a, 0x0d, 0x0a, 0xde, 0xad, 0xbe, 0xef]))
      expect(await tcpClosed).toContain("400")

      // junk instead of a Hello
      const preAuth = new WebSocket(`${address}/reins`)
      preAuth.on("error", () => {})
      await new Promise((r) => preAuth.once("message", r))
      preAuth.send(Buffer.from("definitely not msgpack \u0000\u0001"))
      const preAuthCode = await new Promise<number>((done) => preAuth.on("close", (code) => done(code)))
      expect(preAuthCode).toBe(4001)

      // a stranger cannot make the node buffer a big message: the limit before the handshake is tiny
      const bigHello = new WebSocket(`${address}/reins`)
      bigHello.on("error", () => {})
      await new Promise((r) => bigHello.once("message", r))
      bigHello.send(new Uint8Array(Wire.MAX_HANDSHAKE_FRAME_BYTES + 1))
      expect(await new Promise<number>((done) => bigHello.on("close", (code) => done(code)))).toBe(1009)

      // after the handshake: bytes that are not msgpack, a frame of an unknown kind, an oversized frame
      const notMsgpack = await authenticated(address, secret)
      notMsgpack.ws.send(Buffer.from([0xc1, 0xc1, 0xc1]))
      expect(await notMsgpack.closed).toBe(1007)
      const unknownKind = await authenticated(address, secret)
      unknownKind.ws.send(Wire.encode([99, "what is this"]))
      expect(await unknownKind.closed).toBe(1011)
      const oversized = await authenticated(address, secret)
      oversized.ws.send(Wire.encode([Wire.Kind.Gossip, new Uint8Array(256 * 1024)]))
      expect(await oversized.closed).toBe(1009)

      // and through all that, the node kept serving
      expect(await stillServing(address)).toEqual([Wire.Kind.ExitOk, expect.any(Number), "pong"])
    }), 30_000)
})

describe("a connection's frames before it is listened to", () => {
  it("go through the same guard: a handler that throws on one closes the connection (1011)", async () => {
    const warnings: Array<string> = []
    const thrown: Array<unknown> = []
    let accepted: (connection: Transport.Connection) => void = () => {}
    const connection = new Promise<Transport.Connection>((resolve) => (accepted = resolve))
    const scope = Effect.runSync(Scope.make())
    try {
      const { port } = await Effect.runPromise(
        Transport.listen({
          host: "127.0.0.1",
          port: 0,
          secret,
          self: () => serverInfo,
          maxFrameBytes: 1 << 20,
          health: () => ({}),
          logs: { warn: (m) => void warnings.push(m) },
          // listened to only once the client's frame is in (below), so it waits in the connection
          onConnection: (connection) => accepted(connection)
        }).pipe(Scope.extend(scope))
      )
      const client = await authenticated(`ws://127.0.0.1:${port}`, secret)
      const server = await connection
      client.ws.send(Wire.encode([Wire.Kind.Gossip, new Uint8Array(4)]))
      await new Promise((r) => setTimeout(r, 300)) // the frame crosses loopback before anyone listens
      try {
        server.listen({
          onFrame: () => {
            throw new Error("handler failed")
          },
          onClose: () => {}
        })
      } catch (e) {
        thrown.push(e)
      }
      expect(await client.closed).toBe(1011)
      expect(thrown).toEqual([])
      expect(warnings.some((w) => w.includes("bad frame") && w.includes("handler failed"))).toBe(true)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  }, 20_000)
})
