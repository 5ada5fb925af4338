/**
 * `npm run bench -- transport [seconds]`: request/response across two processes on loopback.
 *
 * (a) baseline: bare `ws` + `msgpackr`, the client sends `[id, bytes]`, the server unpacks the
 *     bytes into an Int32Array and echoes them back; (b) reins: an actor call across nodes (a
 *     client process calling an `echo` actor on a node in the other process: schema-encoded
 *     packed Int32Array, msgpack frames over the node's authenticated websocket). Payloads: 8
 *     tokens ("small") and 2,048 tokens ("tok2k"), with 1 and 64 calls in flight. Plus in-process
 *     actor calls (no serialization) for reference.
 *
 * MB/s counts token bytes both ways (request + echoed reply). The server half runs in a child
 * process started from this same file (`transport --serve`).
 */
import { SocketServer } from "@effect/platform"
import { NodeSocket, NodeSocketServer } from "@effect/platform-node"
import { RpcClient, RpcSerialization, RpcServer } from "@effect/rpc"
import { ActorSystem, Actor, Cluster, Node, Packed, Rpc, RpcGroup } from "@reins/runtime"
import { Context, Effect, Layer, Redacted, Schema } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Packr, Unpackr } from "msgpackr"
import { WebSocket, WebSocketServer } from "ws"
import { percentile, writeReport } from "./report.js"

const EchoRpcs = RpcGroup.make(Rpc.make("Echo", { payload: { ids: Packed.Int32 }, success: Schema.Struct({ ids: Packed.Int32 }) }))
const EchoActor = Actor.make("echo", EchoRpcs)
const echoLayer = EchoActor.toLayer({ Echo: ({ ids }) => Effect.succeed({ ids }) })

/** The same group served by @effect/rpc's own server and socket protocol, msgpack frames. */
const effectRpcServer = RpcServer.layer(EchoRpcs).pipe(
  Layer.provide(EchoRpcs.toLayer({ Echo: ({ ids }) => Effect.succeed({ ids }) })),
  Layer.provide(RpcServer.layerProtocolSocketServer),
  Layer.provide(RpcSerialization.layerMsgPack),
  Layer.provideMerge(NodeSocketServer.layerWebSocket({ host: "127.0.0.1", port: 0, perMessageDeflate: false }))
)

const SIZES = { small: 8, tok2k: 2048 } as const
const ROUNDS = 3
const WARMUP_MS = 500
const IN_FLIGHT = [1, 64] as const
type Size = keyof typeof SIZES

interface Result {
  readonly msgs_per_s: number
  readonly mb_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly calls: number
}

const bytesOf = (a: Int32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
const toInt32 = (bytes: Uint8Array) => {
  const copy = new Uint8Array(bytes.byteLength)
  copy.set(bytes)
  return new Int32Array(copy.buffer)
}

// ---- server process ------------------------------------------------------------------------

const serve = async () => {
  const packr = new Packr({ useRecords: false })
  const unpackr = new Unpackr({ useRecords: false })
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false })
  wss.on("connection", (ws) =>
    ws.on("message", (data) => {
      const [id, bytes] = unpackr.unpack(data as Buffer) as [number, Uint8Array]
      const ids = toInt32(bytes)
      ws.send(packr.pack([id, bytesOf(ids)]))
    }))
  await new Promise((r) => wss.once("listening", r))
  const baselinePort = (wss.address() as { port: number }).port

  const dir = mkdtempSync(path.join(os.tmpdir(), "reins-bench-"))
  const secret = process.env.BENCH_SECRET!
  const program = Effect.gen(function*() {
    const node = yield* Node.CurrentNode
    const rpc = (yield* SocketServer.SocketServer).address
    const rpcPort = rpc._tag === "TcpAddress" ? rpc.port : -1
    process.stdout.write(`${JSON.stringify({ baselinePort, reins: node.address, rpcPort })}\n`)
    return yield* Effect.never
  }).pipe(
    Effect.provide(Layer.merge(Node.layer({ dataDir: dir, secret: Redacted.make(secret) }, echoLayer), effectRpcServer)),
    Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
  )
  const quit = () => {
    rmSync(dir, { recursive: true, force: true })
    process.exit(0)
  }
  process.stdin.on("close", quit)
  process.on("SIGTERM", quit)
  process.stdin.resume()
  await Effect.runPromise(program as Effect.Effect<never, unknown>)
}

// ---- load generators -----------------------------------------------------------------------

const payload = (n: number) => Int32Array.from({ length: n }, (_, i) => (i * 2654435761) | 0)

const summarize = (size: Size, latencies: ReadonlyArray<number>, elapsed: number): Result => {
  const msgs = latencies.length / elapsed
  return {
    msgs_per_s: Math.round(msgs),
    mb_per_s: Number(((msgs * SIZES[size] * 4 * 2) / 1e6).toFixed(2)),
    p50_ms: Number(percentile(latencies, 50).toFixed(3)),
    p99_ms: Number(percentile(latencies, 99).toFixed(3)),
    calls: latencies.length
  }
}

interface Samples {
  readonly latencies: Array<number>
  elapsed: number
}

/** `inFlight` promise loops of `call` for `ms`, timing each call. */
const loops = async (inFlight: number, ms: number, call: () => Promise<void>, into: Samples) => {
  const started = performance.now()
  const deadline = started + ms
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now()
        await call()
        into.latencies.push(performance.now() - t0)
      }
    })
  )
  into.elapsed += (performance.now() - started) / 1000
}

/** The same with fibers: how Effect code calls actors. */
const loopsEffect = (inFlight: number, ms: number, call: Effect.Effect<void, unknown>, into: Samples) =>
  Effect.suspend(() => {
    const started = performance.now()
    const deadline = started + ms
    const loop = Effect.whileLoop({
      while: () => performance.now() < deadline,
      body: () =>
        Effect.suspend(() => {
          const t0 = performance.now()
          return Effect.map(call, () => void into.latencies.push(performance.now() - t0))
        }),
      step: () => {}
    })
    return Effect.forEach(Array.from({ length: inFlight }), () => loop, { concurrency: "unbounded", discard: true }).pipe(
      Effect.map(() => void (into.elapsed += (performance.now() - started) / 1000))
    )
  })

const baselineClient = async (port: number) => {
  const packr = new Packr({ useRecords: false })
  const unpackr = new Unpackr({ useRecords: false })
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false })
  await new Promise((resolve, reject) => {
    ws.once("open", resolve)
    ws.once("error", reject)
  })
  const pending = new Map<number, (ids: Int32Array) => void>()
  let next = 0
  ws.on("message", (data) => {
    const [id, bytes] = unpackr.unpack(data as Buffer) as [number, Uint8Array]
    const resolve = pending.get(id)
    pending.delete(id)
    resolve?.(toInt32(bytes))
  })
  const call = (ids: Int32Array) =>
    new Promise<Int32Array>((resolve) => {
      const id = next++
      pending.set(id, resolve)
      ws.send(packr.pack([id, bytesOf(ids)]))
    })
  return { call, close: () => ws.close() }
}

const allCases = (Object.keys(SIZES) as Array<Size>).flatMap((size) => IN_FLIGHT.map((n) => [size, n] as const))

const main = async (seconds: number) => {
  const secret = randomBytes(24).toString("hex")
  const here = fileURLToPath(new URL(".", import.meta.url))
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", path.join(here, "run.ts"), "transport", "--serve"], {
    env: { ...process.env, BENCH_SECRET: secret },
    stdio: ["pipe", "pipe", "inherit"]
  })
  try {
    const ready = await new Promise<{ baselinePort: number; reins: string; rpcPort: number }>((resolve, reject) => {
      let out = ""
      child.stdout!.on("data", (d) => {
        out += d.toString()
        const line = out.split("\n").find((l) => l.startsWith("{\"baselinePort\""))
        if (line) resolve(JSON.parse(line))
      })
      child.once("exit", (code) => reject(new Error(`server exited with ${code}`)))
    })
    child.stdout!.resume()

    const bare = await baselineClient(ready.baselinePort)
    const { baseline, reins, effectRpc, inProcess } = await Effect.runPromise(
      Effect.gen(function*() {
        const client = yield* Cluster.connect({ join: ready.reins, secret: Redacted.make(secret) })
        const remoteEcho = yield* Effect.provideService(EchoActor.client, ActorSystem, client.system)
        const protocol = yield* Layer.build(
          RpcClient.layerProtocolSocket().pipe(Layer.provide(NodeSocket.layerWebSocket(`ws://127.0.0.1:${ready.rpcPort}`)), Layer.provide(RpcSerialization.layerMsgPack))
        )
        const rpcEcho = yield* Effect.provide(RpcClient.make(EchoRpcs), protocol)
        const local = yield* Layer.build(Layer.provideMerge(echoLayer, ActorSystem.layerLocal()))
        const localEcho = yield* Effect.provideService(EchoActor.client, ActorSystem, Context.get(local, ActorSystem))
        const results = { baseline: {} as Record<string, Result>, reins: {} as Record<string, Result>, effectRpc: {} as Record<string, Result>, inProcess: {} as Record<string, Result> }
        for (const [size, inFlight] of allCases) {
          const ids = payload(SIZES[size])
          const check = (reply: { readonly ids: Int32Array }) =>
            reply.ids.length === ids.length ? Effect.void : Effect.die(new Error("bad echo"))
          const bareCall = async () => {
            if ((await bare.call(ids)).length !== ids.length) throw new Error("bad echo")
          }
          const remoteCall = Effect.flatMap(remoteEcho.Echo({ ids }), check)
          const rpcCall = Effect.flatMap(rpcEcho.Echo({ ids }), check)
          const localCall = Effect.flatMap(localEcho.Echo({ ids }), check)
          const samples = {
            baseline: { latencies: [], elapsed: 0 },
            reins: { latencies: [], elapsed: 0 },
            effectRpc: { latencies: [], elapsed: 0 },
            inProcess: { latencies: [], elapsed: 0 }
          } satisfies Record<string, Samples>
          const warm = { latencies: [], elapsed: 0 }
          yield* Effect.promise(() => loops(inFlight, WARMUP_MS, bareCall, warm))
          yield* loopsEffect(inFlight, WARMUP_MS, remoteCall, warm)
          yield* loopsEffect(inFlight, WARMUP_MS, rpcCall, warm)
          yield* loopsEffect(inFlight, WARMUP_MS, localCall, warm)
          // interleaved rounds, so that load from elsewhere on the machine hits both alike
          const roundMs = (seconds * 1000) / ROUNDS
          for (let round = 0; round < ROUNDS; round++) {
            yield* Effect.promise(() => loops(inFlight, roundMs, bareCall, samples.baseline))
            yield* loopsEffect(inFlight, roundMs, remoteCall, samples.reins)
            yield* loopsEffect(inFlight, roundMs, rpcCall, samples.effectRpc)
            yield* loopsEffect(inFlight, roundMs, localCall, samples.inProcess)
          }
          const key = `${size}_${inFlight}`
          for (const name of ["baseline", "reins", "effectRpc", "inProcess"] as const) {
            results[name][key] = summarize(size, samples[name].latencies, samples[name].elapsed)
          }
          console.log(key, { baseline: results.baseline[key], reins: results.reins[key], effect_rpc: results.effectRpc[key], in_process: results.inProcess[key] })
        }
        return results
      }).pipe(Effect.scoped)
    )
    bare.close()

    const ratio = reins.tok2k_64!.msgs_per_s / baseline.tok2k_64!.msgs_per_s
    const p99Ratio = reins.tok2k_64!.p99_ms / baseline.tok2k_64!.p99_ms
    // Would @effect/rpc's own protocol do instead of reins's Transport (issue 19: at >= 0.9x)?
    const rpcVsReins = Object.fromEntries(
      allCases.map(([size, n]) => [`${size}_${n}`, Number((effectRpc[`${size}_${n}`]!.msgs_per_s / reins[`${size}_${n}`]!.msgs_per_s).toFixed(3))])
    )
    const rows = allCases.flatMap(([size, n]) => {
      const key = `${size}_${n}`
      return ([["ws+msgpackr", baseline], ["reins actor", reins], ["@effect/rpc socket", effectRpc], ["in-process actor", inProcess]] as const).map(([name, r]) => [
        key,
        name,
        n,
        r[key]!.msgs_per_s,
        r[key]!.mb_per_s,
        r[key]!.p50_ms,
        r[key]!.p99_ms
      ])
    })
    writeReport({
      name: "transport",
      json: {
        seconds_per_case: seconds,
        payload_tokens: SIZES,
        baseline,
        reins,
        effect_rpc: effectRpc,
        effect_rpc_vs_reins: rpcVsReins,
        in_process: inProcess,
        ratio_tok2k_64: Number(ratio.toFixed(3)),
        p99_ratio_tok2k_64: Number(p99Ratio.toFixed(3)),
        goals: { ratio_tok2k_64_min: 0.5, p99_ratio_tok2k_64_max: 3, met: ratio >= 0.5 && p99Ratio <= 3 }
      },
      table: { columns: ["case", "transport", "in flight", "msgs/s", "MB/s", "p50 ms", "p99 ms"], rows },
      chart: {
        title: "Echo round trips per second (two processes on loopback; in-process for reference)",
        unit: "msgs/s",
        groups: allCases.map(([size, n]) => {
          const key = `${size}_${n}`
          return {
            label: key,
            bars: [
              { series: "ws+msgpackr", value: baseline[key]!.msgs_per_s },
              { series: "reins actor (cross-node)", value: reins[key]!.msgs_per_s },
              { series: "@effect/rpc socket protocol", value: effectRpc[key]!.msgs_per_s },
              { series: "reins actor (in-process)", value: inProcess[key]!.msgs_per_s }
            ]
          }
        })
      },
      notes: [
        `Two processes on loopback; each case ${seconds} s per transport, in ${ROUNDS} interleaved rounds (baseline, reins, in-process) after a warm-up, so background load hits all alike. small = 8 tokens, tok2k = 2,048 tokens (Int32Array). MB/s counts token bytes both ways.`,
        "Baseline: bare ws + msgpackr, [id, bytes] echoed by the server (unpacked into an Int32Array and packed back).",
        "reins: a client process calls the `echo` actor on a node in the other process (Schema-encoded Packed.Int32, msgpack frames, authenticated websocket).",
        `ratio_tok2k_64 = ${ratio.toFixed(3)} (goal >= 0.5); p99 ratio = ${p99Ratio.toFixed(3)} (goal <= 3).`,
        `@effect/rpc's own socket protocol (RpcServer.layerProtocolSocketServer on a ws server, RpcClient.layerProtocolSocket, msgpack), same RpcGroup, msgs/s over reins's per case: ${Object.entries(rpcVsReins).map(([k, v]) => `${k} ${v}`).join(", ")} (issue 19 replaces reins's Transport with it at >= 0.9x). It has no cluster handshake or secret, membership, or node routing: those would stay reins's either way.`,
        "In-process actor calls pass the Int32Array by reference (no serialization).",
        "Tuning that got reins from ~0.25x to parity on tok2k_64 (same machine, measured with this bench): frames sent in one event-loop turn are batched into one websocket message (the first goes at once); incoming frames of a connection run on one fiber instead of a fiber each; client frames use an all-zero mask (ws skips the XOR pass); RpcClient's per-call payload validation (payloadSchema.make, ~15 us for a struct with a packed field) is skipped since the wire encoding validates anyway; replies are encoded from the success schema alone when they succeed.",
        "The machine is shared with other CPU-heavy jobs: absolute numbers swing 2-3x between runs, so compare rows of the same run (the rounds are interleaved for that reason)."
      ]
    })
  } finally {
    child.stdin!.end()
    child.kill("SIGTERM")
  }
}

export default async (args: ReadonlyArray<string>) => {
  if (args[0] === "--serve") return serve()
  const seconds = args[0] ? Number(args[0]) : 3
  if (!(seconds > 0)) throw new Error("usage: npm run bench -- transport [seconds per case]")
  await main(seconds)
  process.exit(0)
}
