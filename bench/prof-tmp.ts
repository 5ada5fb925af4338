import { ActorSystem, Actor, Cluster, Packed, Rpc, RpcGroup } from "@reins/runtime"
import { Effect, Redacted, Schema } from "effect"
import { spawn } from "node:child_process"
const EchoActor = Actor.make("echo", RpcGroup.make(Rpc.make("Echo", { payload: { ids: Packed.Int32 }, success: Schema.Struct({ ids: Packed.Int32 }) })))
const secret = "prof-secret-0123456789abcdef"
const child = spawn(process.execPath, ["--import", "tsx", "--cpu-prof", "--cpu-prof-dir=/tmp/rt-prof/server", "bench/run.ts", "transport", "--serve"], { env: { ...process.env, BENCH_SECRET: secret }, stdio: ["pipe", "pipe", "inherit"] })
const ready = await new Promise<{ reins: string }>((resolve) => { let out = ""; child.stdout!.on("data", (d) => { out += d; const l = out.split("\n").find((x) => x.startsWith("{")); if (l) resolve(JSON.parse(l)) }) })
const ids = Int32Array.from({ length: 8 }, (_, i) => i)
await Effect.runPromise(Effect.gen(function*() {
  const client = yield* Cluster.connect({ join: ready.reins, secret: Redacted.make(secret) })
  const echo = yield* Effect.provideService(EchoActor.client, ActorSystem, client.system)
  let n = 0
  const deadline = performance.now() + 10000
  const loop = Effect.whileLoop({ while: () => performance.now() < deadline, body: () => Effect.map(echo.Echo({ ids }), () => void n++), step: () => {} })
  yield* Effect.forEach(Array.from({ length: 64 }), () => loop, { concurrency: "unbounded", discard: true })
  console.log("msgs/s", n / 10)
}).pipe(Effect.scoped))
child.stdin!.end()
await new Promise((r) => setTimeout(r, 1500))
process.exit(0)
