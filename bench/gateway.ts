/**
 * `npm run bench -- gateway [--seconds N] [--requests N]`: what the Gateway adds to a model call.
 *
 * A fast fake OpenAI upstream runs on loopback (its own process). In one run we measure:
 * - direct: the client calls the upstream;
 * - reins: through `reins serve --upstream` (recording on: every call written to SQLite before
 *   its response, verified by counting the rows afterwards);
 * - portkey: through the Portkey AI gateway (@portkey-ai/gateway 1.15.2), the reference LLM gateway.
 * Latency at 1 client (p50/p99, sequential requests), added latency = target − direct, and
 * requests/s at 1 and 64 concurrent clients. Every process is a child on 127.0.0.1.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Pool } from "undici"
import { percentile, writeReport } from "./report.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const ADMIN = "bench-admin-token"

/** The upstream: answers every chat completion with the same small body, as fast as node can. */
const UPSTREAM = `
import { createServer } from "node:http"
const body = JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion", created: 1, model: "bench-model",
  choices: [{ index: 0, message: { role: "assistant", content: "The answer is 42." }, logprobs: null, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 } })
const server = createServer((req, res) => {
  req.resume()
  req.on("end", () => { res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }); res.end(body) })
})
server.keepAliveTimeout = 65000
server.listen(Number(process.argv[1]), "127.0.0.1", () => console.log("listening"))
`

interface Target {
  readonly name: "direct" | "reins" | "portkey"
  readonly origin: string
  readonly path: string
  readonly headers: Record<string, string>
}

interface Measured {
  readonly p50: number
  readonly p99: number
  readonly rps_1: number
  readonly rps_64: number
  readonly p50_64: number
  readonly p99_64: number
  readonly ok: number
  readonly errors: number
}

const children: Array<ChildProcess> = []

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })

/** Spawns a child and resolves once its output matches `ready`. */
const start = (name: string, args: ReadonlyArray<string>, ready: RegExp, env: Record<string, string> = {}) =>
  new Promise<{ proc: ChildProcess; match: RegExpExecArray }>((resolve, reject) => {
    const proc = spawn(process.execPath, args, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
    children.push(proc)
    let out = ""
    const timer = setTimeout(() => reject(new Error(`${name} did not start in 60 s:\n${out}`)), 60_000)
    const onData = (b: Buffer) => {
      out += b.toString()
      const m = ready.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve({ proc, match: m })
      }
    }
    proc.stdout!.on("data", onData)
    proc.stderr!.on("data", onData)
    proc.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`${name} exited with ${code}:\n${out}`))
    })
  })

const stop = (proc: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve()
    proc.once("exit", () => resolve())
    proc.kill("SIGTERM")
    setTimeout(() => proc.kill("SIGKILL"), 10_000).unref()
  })

const body = JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "What is six times seven?" }], max_tokens: 16 })

const once = async (pool: Pool, t: Target): Promise<boolean> => {
  const r = await pool.request({ method: "POST", path: t.path, headers: { "content-type": "application/json", ...t.headers }, body })
  const text = await r.body.text()
  return r.statusCode === 200 && text.includes("The answer is 42.")
}

/** Sequential latencies of `n` requests (ms each). */
const sequentialLatencies = async (pool: Pool, t: Target, n: number, count: (good: boolean) => void): Promise<Array<number>> => {
  const out: Array<number> = []
  for (let i = 0; i < n; i++) {
    const s = performance.now()
    count(await once(pool, t))
    out.push(performance.now() - s)
  }
  return out
}

/** Requests per second and latencies of 64 clients for `seconds`. */
const concurrentLoad = async (pool: Pool, t: Target, seconds: number, count: (good: boolean) => void) => {
  const latencies: Array<number> = []
  const deadline = performance.now() + seconds * 1000
  const started = performance.now()
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (performance.now() < deadline) {
        const s = performance.now()
        count(await once(pool, t))
        latencies.push(performance.now() - s)
      }
    })
  )
  return { latencies, rps: latencies.length / ((performance.now() - started) / 1000) }
}

/**
 * Every target warms up, then the sequential requests run in interleaved rounds (each round a
 * slice for every target in turn), so drift in the machine's load hits all targets alike; the
 * 64-client phase follows, target by target.
 */
const measureAll = async (targets: ReadonlyArray<Target>, requests: number, seconds: number): Promise<Record<string, Measured>> => {
  const state = targets.map((t) => ({ t, pool: new Pool(t.origin, { connections: 64, keepAliveTimeout: 60_000, pipelining: 1 }), ok: 0, errors: 0, sequential: [] as Array<number> }))
  const counter = (x: (typeof state)[number]) => (good: boolean) => (good ? x.ok++ : x.errors++)
  for (const x of state) await sequentialLatencies(x.pool, x.t, Math.min(500, requests), counter(x)) // warm-up
  const rounds = 8
  for (let r = 0; r < rounds; r++) {
    for (const x of state) {
      const n = Math.floor(requests / rounds) + (r < requests % rounds ? 1 : 0)
      x.sequential.push(...(await sequentialLatencies(x.pool, x.t, n, counter(x))))
    }
  }
  const results: Record<string, Measured> = {}
  for (const x of state) {
    console.log(`measuring ${x.t.name} at 64 clients ...`)
    const load = await concurrentLoad(x.pool, x.t, seconds, counter(x))
    await x.pool.close()
    results[x.t.name] = {
      p50: percentile(x.sequential, 50),
      p99: percentile(x.sequential, 99),
      rps_1: x.sequential.length / (x.sequential.reduce((a, b) => a + b, 0) / 1000),
      rps_64: load.rps,
      p50_64: percentile(load.latencies, 50),
      p99_64: percentile(load.latencies, 99),
      ok: x.ok,
      errors: x.errors
    }
  }
  return results
}

const countRecorded = (file: string) =>
  Effect.runPromise(
    Effect.flatMap(SqliteClient.SqliteClient, (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM calls WHERE status = 200`).pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.provide(SqliteClient.layer({ filename: file, readonly: true }))
    )
  )

const flag = (args: ReadonlyArray<string>, name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`)
  const v = i >= 0 ? Number(args[i + 1]) : fallback
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} must be a positive number`)
  return v
}

export default async (args: ReadonlyArray<string>) => {
  const seconds = flag(args, "seconds", 5)
  const requests = flag(args, "requests", 2000)
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "reins-bench-gateway-"))
  try {
    const upstreamPort = await freePort()
    await start("upstream", ["--input-type=module", "-e", UPSTREAM, String(upstreamPort)], /listening/)
    const upstream = `http://127.0.0.1:${upstreamPort}`

    const reins = await start("reins", ["packages/reins/bin/reins.js", "serve", "--upstream", `${upstream}/v1`, "--http", "127.0.0.1:0", "--data", dataDir], /listening on (http:\/\/[^\s]+)\/v1/, {
      REINS_ADMIN_TOKEN: ADMIN
    })
    const reinsUrl = reins.match[1]!
    const created = await fetch(`${reinsUrl}/api/rollouts`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ task: { bench: "gateway" } }) })
    const { attempt_key: key } = (await created.json()) as { attempt_key: string }

    const portkeyPort = await freePort()
    await start("portkey", ["node_modules/@portkey-ai/gateway/build/start-server.js", `--port=${portkeyPort}`, "--headless"], /Ready for connections/, { NODE_ENV: "production" })

    const targets: Array<Target> = [
      { name: "direct", origin: upstream, path: "/v1/chat/completions", headers: { authorization: "Bearer unused" } },
      { name: "reins", origin: reinsUrl, path: "/v1/chat/completions", headers: { authorization: `Bearer ${key}` } },
      {
        name: "portkey",
        origin: `http://127.0.0.1:${portkeyPort}`,
        path: "/v1/chat/completions",
        headers: { authorization: "Bearer unused", "x-portkey-provider": "openai", "x-portkey-custom-host": `${upstream}/v1` }
      }
    ]
    console.log(`measuring ${targets.map((t) => t.name).join(", ")}: ${requests} sequential requests each, in interleaved rounds ...`)
    const results = await measureAll(targets, requests, seconds)
    for (const t of targets) if (results[t.name]!.errors > 0) throw new Error(`${t.name}: ${results[t.name]!.errors} failed requests`)
    await stop(reins.proc)
    const recorded = await countRecorded(path.join(dataDir, "reins.db"))
    if (recorded !== results.reins!.ok) throw new Error(`reins recorded ${recorded} calls but answered ${results.reins!.ok}`)

    const direct = results.direct!
    const row = (name: string) => {
      const m = results[name]!
      return {
        added_p50_ms: name === "direct" ? 0 : m.p50 - direct.p50,
        added_p99_ms: name === "direct" ? 0 : m.p99 - direct.p99,
        rps_1: m.rps_1,
        rps_64: m.rps_64,
        p50_ms: m.p50,
        p99_ms: m.p99,
        p50_64_ms: m.p50_64,
        p99_64_ms: m.p99_64,
        requests: m.ok
      }
    }
    const json = { direct: row("direct"), reins: { ...row("reins"), calls_recorded: recorded }, portkey: row("portkey") }
    const names = ["direct", "reins", "portkey"] as const
    writeReport({
      name: "gateway",
      json,
      table: {
        columns: ["target", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "rps @1", "rps @64", "p99 @64 ms"],
        rows: names.map((n) => {
          const r = row(n)
          return [n, r.p50_ms, r.p99_ms, r.added_p50_ms, r.added_p99_ms, r.rps_1, r.rps_64, r.p99_64_ms]
        })
      },
      chart: {
        title: "Latency added to a model call (1 client)",
        unit: "ms",
        groups: [
          { label: "added p50", bars: names.slice(1).map((n) => ({ series: n, value: Math.max(0, row(n).added_p50_ms) })) },
          { label: "added p99", bars: names.slice(1).map((n) => ({ series: n, value: Math.max(0, row(n).added_p99_ms) })) }
        ]
      },
      notes: [
        `Fake OpenAI upstream on loopback (own process). ${requests} sequential requests per target after a 500-request warm-up, in 8 interleaved rounds (each round a slice for every target in turn, so load drift hits all alike); then 64 concurrent clients for ${seconds} s, target by target.`,
        `reins recorded every one of its ${recorded} answered calls in SQLite (WAL, synchronous=NORMAL) before responding; counted after shutdown.`,
        "Portkey: @portkey-ai/gateway 1.15.2 (node build, headless, NODE_ENV=production), provider openai with x-portkey-custom-host.",
        "All processes share the machine's cores with the load generator; compare targets within one run."
      ]
    })
  } finally {
    await Promise.all(children.map(stop))
    rmSync(dataDir, { recursive: true, force: true })
  }
}
