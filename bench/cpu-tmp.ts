// CPU cost per echo call, client and server in one process (both halves counted).
import { ActorSystem, Actor, Node, Packed, Rpc, RpcGroup } from "@reins/runtime"
import { Context, Effect, Exit, Layer, Logger, LogLevel, Redacted, Schema, Scope } from "effect"
import { mkdtempSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { Packr, Unpackr } from "msgpackr"
import { WebSocket, WebSocketServer } from "ws"
const EchoActor = Actor.make("echo", RpcGroup.make(Rpc.make("Echo", { payload: { ids: Packed.Int32 }, success: Schema.Struct({ ids: Packed.Int32 }) })))
let sent = 0, bytes = 0
const orig = WebSocket.prototype.send
WebSocket.prototype.send = function (d: any, ...rest: any[]) { sent++; bytes += d.length ?? d.byteLength; return (orig as any).call(this, d, ...rest) }
const N = Number(process.argv[2] ?? 20000)
const ids = Int32Array.from({ length: 2048 }, (_, i) => i)
const cpu = async (name: string, f: () => Promise<void>) => {
  const c0 = process.cpuUsage(); const t0 = performance.now()
  await f()
  const c = process.cpuUsage(c0); const ms = performance.now() - t0
  console.log(name, "frames/call", (sent / N).toFixed(2), "bytes/call", (bytes / N).toFixed(0)); sent = 0; bytes = 0; console.log(name, "cpu µs/call", ((c.user + c.system) / N).toFixed(1), "wall µs/call", (ms * 1000 / N).toFixed(1))
}
if (process.env.SKIP_BASELINE !== "1") {
  const packr = new Packr({ useRecords: false }), unpackr = new Unpackr({ useRecords: false })
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false })
  wss.on("connection", (ws) => ws.on("message", (d) => { const [id, b] = unpackr.unpack(d as Buffer); const c = new Uint8Array(b.byteLength); c.set(b); ws.send(packr.pack([id, new Uint8Array(new Int32Array(c.buffer).buffer)])) }))
  await new Promise((r) => wss.once("listening", r))
  const ws = new WebSocket(`ws://127.0.0.1:${(wss.address() as any).port}`, { perMessageDeflate: false })
  await new Promise((r) => ws.once("open", r))
  const pending = new Map<number, () => void>(); let next = 0
  ws.on("message", (d) => { const [id, b] = unpackr.unpack(d as Buffer); const c = new Uint8Array(b.byteLength); c.set(b); pending.get(id)!(); pending.delete(id) })
  const call = () => new Promise<void>((r) => { const id = next++; pending.set(id, r); ws.send(packr.pack([id, new Uint8Array(ids.buffer)])) })
  await cpu("baseline", async () => { let left = N; await Promise.all(Array.from({ length: 64 }, async () => { while (left-- > 0) await call() })) })
  ws.close(); wss.close()
}
// reins, two nodes in-process
if (process.env.SKIP_REINS !== "1") await Effect.runPromise(Effect.gen(function*() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "cpu-"))
  const secret = Redacted.make("cpu-secret-0123456789abcdef")
  const sa = yield* Scope.make()
  const a = yield* Layer.buildWithScope(Node.layer({ dataDir: path.join(dir, "a"), secret }, EchoActor.toLayer({ Echo: ({ ids }) => Effect.succeed({ ids }) })), sa)
  const addr = Context.get(a, Node.CurrentNode).address
  const b = yield* Layer.buildWithScope(Node.layer({ dataDir: path.join(dir, "b"), secret, join: [addr] }, Layer.empty), sa)
  const sys = Context.get(b, ActorSystem)
  yield* Effect.sleep("1500 millis")
  const echo = yield* Effect.provideService(EchoActor.client, ActorSystem, sys)
  yield* echo.Echo({ ids })
  let left = N
  const loop = Effect.whileLoop({ while: () => left-- > 0, body: () => echo.Echo({ ids }), step: () => {} })
  yield* Effect.promise(() => cpu("reins", () => Effect.runPromise(Effect.forEach(Array.from({ length: 64 }), () => loop, { concurrency: "unbounded", discard: true }))))
  yield* Scope.close(sa, Exit.void)
}).pipe(Logger.withMinimumLogLevel(LogLevel.Error)))
process.exit(0)
