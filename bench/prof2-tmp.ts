import { ActorSystem, Actor, Cluster, Packed, Rpc, RpcGroup } from "@reins/runtime"
import { Effect, Logger, LogLevel, Redacted, Schema } from "effect"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
const EchoActor = Actor.make("echo", RpcGroup.make(Rpc.make("Echo", { payload: { ids: Packed.Int32 }, success: Schema.Struct({ ids: Packed.Int32 }) })))
const secret = "prof-secret-0123456789abcdef"
const child = spawn(process.execPath, ["--import", "tsx", "bench/run.ts", "transport", "--serve"], { env: { ...process.env, BENCH_SECRET: secret }, stdio: ["pipe", "pipe", "inherit"] })
const ready = await new Promise<{ reins: string; baselinePort: number }>((resolve) => { let out = ""; child.stdout!.on("data", (d) => { out += d; const l = out.split("\n").find((x) => x.startsWith("{")); if (l) resolve(JSON.parse(l)) }) })
const ticks = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" "); return (Number(f[11]) + Number(f[12])) * 10_000 } // µs
const size = Number(process.argv[2] ?? 8)
const ids = Int32Array.from({ length: size }, (_, i) => i)
import { Packr, Unpackr } from "msgpackr"
import { WebSocket } from "ws"
{
  const packr = new Packr({ useRecords: false }), unpackr = new Unpackr({ useRecords: false })
  const ws = new WebSocket(`ws://127.0.0.1:${ready.baselinePort}`, { perMessageDeflate: false })
  await new Promise((r) => ws.once("open", r))
  const pending = new Map<number, () => void>(); let next = 0
  ws.on("message", (d) => { const [id, b] = unpackr.unpack(d as Buffer); const c = new Uint8Array(b.byteLength); c.set(b); pending.get(id)!(); pending.delete(id) })
  const call = () => new Promise<void>((r) => { const id = next++; pending.set(id, r); ws.send(packr.pack([id, new Uint8Array(ids.buffer)])) })
  for (let k = 0; k < 2; k++) {
    let n = 0
    const c0 = process.cpuUsage(); const s0 = ticks(child.pid!)
    const deadline = performance.now() + 3000
    await Promise.all(Array.from({ length: 64 }, async () => { while (performance.now() < deadline) { await call(); n++ } }))
    const c = process.cpuUsage(c0); const s = ticks(child.pid!) - s0
    console.log("baseline msgs/s", (n / 3).toFixed(0), "client cpu µs/call", ((c.user + c.system) / n).toFixed(1), "server cpu µs/call", (s / n).toFixed(1))
  }
  ws.close()
}
await Effect.runPromise(Effect.gen(function*() {
  const client = yield* Cluster.connect({ join: ready.reins, secret: Redacted.make(secret) })
  const echo = yield* Effect.provideService(EchoActor.client, ActorSystem, client.system)
  for (let k = 0; k < 2; k++) {
    let n = 0
    const c0 = process.cpuUsage(); const s0 = ticks(child.pid!)
    const deadline = performance.now() + 3000
    const loop = Effect.whileLoop({ while: () => performance.now() < deadline, body: () => Effect.map(echo.Echo({ ids }), () => void n++), step: () => {} })
    yield* Effect.forEach(Array.from({ length: 64 }), () => loop, { concurrency: "unbounded", discard: true })
    const c = process.cpuUsage(c0); const s = ticks(child.pid!) - s0
    console.log("reins msgs/s", (n / 3).toFixed(0), "client cpu µs/call", ((c.user + c.system) / n).toFixed(1), "server cpu µs/call", (s / n).toFixed(1))
  }
}).pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Error)))
child.stdin!.end()
process.exit(0)
