/**
 * `npm run bench -- gateway [--seconds N] [--requests N]`: what the Gateway adds to a model call,
 * on each API a harness speaks: OpenAI chat completions (`/v1/chat/completions`), the OpenAI
 * Responses API (`/v1/responses`) and Anthropic Messages (`/v1/messages`).
 *
 * A fast fake upstream that speaks all three runs on loopback (its own process). In one run we
 * measure, per route:
 * - direct: the client calls the upstream;
 * - reins: through `reins serve --upstream` (recording on: every call written to SQLite before
 *   its response, verified by counting each route's rows afterwards). Chat goes through reins's
 *   chat proxy; Responses and Messages are relayed to the upstream as received;
 * - portkey: through the Portkey AI gateway (@portkey-ai/gateway 1.15.2), the reference LLM
 *   gateway: provider `openai` with `x-portkey-custom-host` for chat and Responses, provider
 *   `anthropic` with the same custom host for Messages.
 * Latency at 1 client (p50/p99, sequential requests), added latency = target − direct on the same
 * route, and requests/s at 1 and 64 concurrent clients; and each gateway's V8 collections over the
 * run (bench/gcTrace.ts), where the tails come from. Every process is a child on 127.0.0.1.
 * `--requests` (sequential requests per route and target, default 2000) and `--seconds` (the
 * 64-client phase per route and target, default 5) shorten a smoke run. `--young-mb N` starts both
 * gateways (not the upstream or the client) with V8's young generation raised to N MB per
 * semi-space (`--max-semi-space-size`; packages/gateway/README.md, Tail latency, says what it does) and
 * writes `gateway-young<N>` instead of `gateway`.
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
import { GC_TRACE_FLAG, summarizeGcTrace } from "./gcTrace.js"
import { percentile, writeReport } from "./report.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const ADMIN = "bench-admin-token"
const ANSWER = "The answer is 42."

/**
 * The upstream: answers every call of a route with the same small body in that protocol's shape
 * (a chat completion, a Responses `response`, a Messages `message`), as fast as node can.
 */
const UPSTREAM = `
import { createServer } from "node:http"
const TEXT = ${JSON.stringify(ANSWER)}
const bodies = {
  "/v1/chat/completions": { id: "chatcmpl-bench", object: "chat.completion", created: 1, model: "bench-model",
    choices: [{ index: 0, message: { role: "assistant", content: TEXT }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 } },
  "/v1/responses": { id: "resp_bench", object: "response", created_at: 1, status: "completed", error: null, incomplete_details: null,
    model: "bench-model", instructions: "You are terse.", max_output_tokens: 16, store: false, previous_response_id: null,
    output: [{ type: "message", id: "msg_bench", status: "completed", role: "assistant", content: [{ type: "output_text", text: TEXT, annotations: [] }] }],
    usage: { input_tokens: 12, input_tokens_details: { cached_tokens: 0 }, output_tokens: 6, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 18 } },
  "/v1/messages": { id: "msg_bench", type: "message", role: "assistant", model: "bench-model", content: [{ type: "text", text: TEXT }],
    stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 12, output_tokens: 6 } }
}
const encoded = Object.fromEntries(Object.entries(bodies).map(([route, body]) => [route, JSON.stringify(body)]))
const server = createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    const body = encoded[req.url.split("?")[0]]
    if (body === undefined) {
      res.writeHead(404, { "content-type": "application/json" })
      return res.end(JSON.stringify({ error: { type: "not_found", message: "no route " + req.url } }))
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
    res.end(body)
  })
})
server.keepAliveTimeout = 65000
server.listen(Number(process.argv[1]), "127.0.0.1", () => console.log("listening"))
`

type RouteName = "chat" | "responses" | "messages"
type TargetName = "direct" | "reins" | "portkey"
const TARGETS: ReadonlyArray<TargetName> = ["direct", "reins", "portkey"]

/** Each route's request: the same question in the route's shape; `endpoint` is reins's name for it in the store. */
const ROUTES: ReadonlyArray<{ readonly name: RouteName; readonly path: string; readonly endpoint: string; readonly body: string }> = [
  {
    name: "chat",
    path: "/v1/chat/completions",
    endpoint: "chat.completions",
    body: JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "What is six times seven?" }], max_tokens: 16 })
  },
  {
    name: "responses",
    path: "/v1/responses",
    endpoint: "responses",
    body: JSON.stringify({ model: "bench-model", instructions: "You are terse.", input: "What is six times seven?", max_output_tokens: 16, store: false })
  },
  {
    name: "messages",
    path: "/v1/messages",
    endpoint: "messages",
    body: JSON.stringify({ model: "bench-model", system: "You are terse.", messages: [{ role: "user", content: "What is six times seven?" }], max_tokens: 16 })
  }
]

interface Target {
  readonly route: RouteName
  readonly name: TargetName
  readonly origin: string
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
}

const label = (t: { readonly route: RouteName; readonly name: TargetName }) => `${t.route}/${t.name}`

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
  new Promise<{ proc: ChildProcess; match: RegExpExecArray; output: () => string }>((resolve, reject) => {
    const proc = spawn(process.execPath, args, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
    children.push(proc)
    let out = ""
    let started = false
    const timer = setTimeout(() => reject(new Error(`${name} did not start in 60 s:\n${out}`)), 60_000)
    const onData = (b: Buffer) => {
      out += b.toString()
      const m = started ? null : ready.exec(out)
      if (m) {
        started = true
        clearTimeout(timer)
        resolve({ proc, match: m, output: () => out })
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

const post = async (pool: Pool, t: Target) => {
  const r = await pool.request({ method: "POST", path: t.path, headers: { "content-type": "application/json", ...t.headers }, body: t.body })
  return { status: r.statusCode, text: await r.body.text() }
}

const once = async (pool: Pool, t: Target): Promise<boolean> => {
  const r = await post(pool, t)
  return r.status === 200 && r.text.includes(ANSWER)
}

/** One request before measuring: whether the target serves its route, and what it answered if not. */
const probe = async (t: Target): Promise<string | null> => {
  const pool = new Pool(t.origin, { connections: 1 })
  try {
    const r = await post(pool, t)
    return r.status === 200 && r.text.includes(ANSWER) ? null : `HTTP ${r.status}: ${r.text.slice(0, 300)}`
  } catch (e) {
    return String(e)
  } finally {
    await pool.close()
  }
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
 * Every target (a route through one of direct, reins, portkey) warms up, then the sequential
 * requests run in interleaved rounds (each round a slice for every target in turn), so drift in
 * the machine's load hits all targets alike; the 64-client phase follows, target by target.
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
    console.log(`measuring ${label(x.t)} at 64 clients ...`)
    const load = await concurrentLoad(x.pool, x.t, seconds, counter(x))
    await x.pool.close()
    results[label(x.t)] = {
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

/** Answered calls reins recorded, per endpoint. */
const countRecorded = (file: string) =>
  Effect.runPromise(
    Effect.flatMap(SqliteClient.SqliteClient, (sql) => sql<{ endpoint: string; n: number }>`SELECT endpoint, COUNT(*) AS n FROM calls WHERE status = 200 GROUP BY endpoint`).pipe(
      Effect.map((rows) => Object.fromEntries(rows.map((r) => [r.endpoint, r.n])) as Record<string, number>),
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
  const youngMb = args.includes("--young-mb") ? flag(args, "young-mb", 16) : null
  // The same V8 flags for both gateways, so the comparison stays like for like; tracing the
  // collections changes none of them.
  const gatewayFlags = [GC_TRACE_FLAG, ...(youngMb === null ? [] : [`--max-semi-space-size=${youngMb}`])]
  const tuning = gatewayFlags.filter((f) => f !== GC_TRACE_FLAG)
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "reins-bench-gateway-"))
  try {
    const upstreamPort = await freePort()
    await start("upstream", ["--input-type=module", "-e", UPSTREAM, String(upstreamPort)], /listening/)
    const upstream = `http://127.0.0.1:${upstreamPort}`

    const reins = await start("reins", [...gatewayFlags, "packages/reins/bin/reins.js", "serve", "--upstream", `${upstream}/v1`, "--http", "127.0.0.1:0", "--data", dataDir], /listening on (http:\/\/[^\s]+)\/v1/, {
      REINS_ADMIN_TOKEN: ADMIN
    })
    const reinsUrl = reins.match[1]!
    const created = await fetch(`${reinsUrl}/api/rollouts`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ task: { bench: "gateway" } }) })
    const { attempt_key: key } = (await created.json()) as { attempt_key: string }

    const portkeyPort = await freePort()
    const portkey = await start("portkey", [...gatewayFlags, "node_modules/@portkey-ai/gateway/build/start-server.js", `--port=${portkeyPort}`, "--headless"], /Ready for connections/, { NODE_ENV: "production" })

    // How each target is called on each route: OpenAI's bearer key, or Anthropic's x-api-key and
    // version; Portkey is told the provider and the upstream as its custom host.
    const anthropic = { "anthropic-version": "2023-06-01" }
    const portkeyTo = (provider: string) => ({ "x-portkey-provider": provider, "x-portkey-custom-host": `${upstream}/v1` })
    const headers: Record<RouteName, Record<TargetName, Record<string, string>>> = {
      chat: {
        direct: { authorization: "Bearer unused" },
        reins: { authorization: `Bearer ${key}` },
        portkey: { authorization: "Bearer unused", ...portkeyTo("openai") }
      },
      responses: {
        direct: { authorization: "Bearer unused" },
        reins: { authorization: `Bearer ${key}` },
        portkey: { authorization: "Bearer unused", ...portkeyTo("openai") }
      },
      messages: {
        direct: { "x-api-key": "unused", ...anthropic },
        reins: { "x-api-key": key, ...anthropic },
        portkey: { "x-api-key": "unused", ...anthropic, ...portkeyTo("anthropic") }
      }
    }
    const origins: Record<TargetName, string> = { direct: upstream, reins: reinsUrl, portkey: `http://127.0.0.1:${portkeyPort}` }
    const all: Array<Target> = ROUTES.flatMap((r) => TARGETS.map((name) => ({ route: r.name, name, origin: origins[name], path: r.path, headers: headers[r.name][name], body: r.body })))

    // A route Portkey does not serve is reported with its answer and not measured; the upstream
    // and reins must serve every route.
    const unavailable: Partial<Record<RouteName, string>> = {}
    const targets: Array<Target> = []
    for (const t of all) {
      const failed = await probe(t)
      if (failed === null) targets.push(t)
      else if (t.name === "portkey") unavailable[t.route] = failed
      else throw new Error(`${label(t)} does not answer: ${failed}`)
    }
    for (const [route, evidence] of Object.entries(unavailable)) console.log(`portkey does not serve ${route} (${evidence}); left out`)

    console.log(`measuring ${targets.map(label).join(", ")}: ${requests} sequential requests each, in interleaved rounds ...`)
    const results = await measureAll(targets, requests, seconds)
    for (const t of targets) if (results[label(t)]!.errors > 0) throw new Error(`${label(t)}: ${results[label(t)]!.errors} failed requests`)
    await stop(reins.proc)
    const recorded = await countRecorded(path.join(dataDir, "reins.db"))
    for (const r of ROUTES) {
      const answered = results[label({ route: r.name, name: "reins" })]!.ok + 1 // and its probe
      if ((recorded[r.endpoint] ?? 0) !== answered) throw new Error(`reins recorded ${recorded[r.endpoint] ?? 0} ${r.name} calls but answered ${answered}`)
    }

    const row = (route: RouteName, name: TargetName) => {
      const m = results[label({ route, name })]
      if (m === undefined) return null
      const direct = results[label({ route, name: "direct" })]!
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
    const routeJson = (r: (typeof ROUTES)[number]) => {
      const ours = row(r.name, "reins")!
      const theirs = row(r.name, "portkey")
      return {
        path: r.path,
        direct: row(r.name, "direct")!,
        reins: { ...ours, calls_recorded: recorded[r.endpoint] ?? 0 },
        portkey: theirs ?? { not_served: unavailable[r.name] ?? "" },
        reins_below_portkey: theirs === null ? null : { p50: ours.added_p50_ms < theirs.added_p50_ms, p99: ours.added_p99_ms < theirs.added_p99_ms }
      }
    }
    const gc = { reins: summarizeGcTrace(reins.output()), portkey: summarizeGcTrace(portkey.output()) }
    const json = { ...Object.fromEntries(ROUTES.map((r) => [r.name, routeJson(r)])), gc }
    const verdict = ROUTES.map((r) => {
      const v = routeJson(r).reins_below_portkey
      return v === null ? `${r.name}: Portkey does not serve it` : `${r.name}: p50 ${v.p50 ? "yes" : "NO"}, p99 ${v.p99 ? "yes" : "NO"}`
    })
    writeReport({
      name: youngMb === null ? "gateway" : `gateway-young${youngMb}`,
      json,
      table: {
        columns: ["route", "target", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "rps @1", "rps @64", "p99 @64 ms"],
        rows: ROUTES.flatMap((r) =>
          TARGETS.map((n) => {
            const x = row(r.name, n)
            return x === null ? [r.name, n, "not served", "", "", "", "", "", ""] : [r.name, n, x.p50_ms, x.p99_ms, x.added_p50_ms, x.added_p99_ms, x.rps_1, x.rps_64, x.p99_64_ms]
          })
        )
      },
      chart: {
        title: "Latency added to a model call, per API (1 client)",
        unit: "ms",
        groups: ROUTES.flatMap((r) =>
          (["p50", "p99"] as const).map((q) => ({
            label: `${r.name} ${q}`,
            bars: TARGETS.slice(1).flatMap((n) => {
              const x = row(r.name, n)
              return x === null ? [] : [{ series: n, value: Math.max(0, q === "p50" ? x.added_p50_ms : x.added_p99_ms) }]
            })
          }))
        )
      },
      notes: [
        `Fake upstream on loopback (own process) answering ${ROUTES.map((r) => `${r.path} (${r.name})`).join(", ")} in each protocol's shape. ${requests} sequential requests per route and target after a ${Math.min(500, requests)}-request warm-up, in 8 interleaved rounds (each round a slice for every route and target in turn, so load drift hits all alike); then 64 concurrent clients for ${seconds} s, route and target one by one. Added latency is against direct on the same route.`,
        `reins recorded every one of its answered calls in SQLite (WAL, synchronous=NORMAL) before responding (${ROUTES.map((r) => `${r.name} ${recorded[r.endpoint] ?? 0}`).join(", ")}; counted per endpoint after shutdown). Chat goes through reins's chat proxy; Responses and Messages are relayed as received (recorded as not trainable: such an upstream returns no token ids).`,
        "Portkey: @portkey-ai/gateway 1.15.2 (node build, headless, NODE_ENV=production); chat and Responses with provider openai and x-portkey-custom-host, Messages with provider anthropic and the same custom host.",
        youngMb === null
          ? "Both gateways run with node's default V8 settings (reins's command line turns off V8's allocation-site pretenuring itself, as it does wherever it runs: packages/reins/bin/reins.js says why)."
          : `Both gateways run with ${tuning.join(" ")} (V8's young generation at ${youngMb} MB per semi-space instead of 16); the upstream and the client with node's defaults.`,
        `V8 collections over the whole run (${GC_TRACE_FLAG}): ${(["reins", "portkey"] as const).map((n) => `${n} ${gc[n].scavenges} scavenges, pause mean ${gc[n].scavenge_pause_mean_ms.toFixed(2)} ms (max ${gc[n].scavenge_pause_max_ms.toFixed(1)}), ${Math.round(gc[n].promoted_kb_per_scavenge)} KB promoted per scavenge, ${gc[n].mark_compacts} mark-compacts (max ${gc[n].mark_compact_pause_max_ms.toFixed(1)} ms)`).join("; ")}.`,
        ...Object.entries(unavailable).map(([route, evidence]) => `Portkey does not serve ${route}, so it is not measured there; it answered ${evidence}`),
        `reins adds less latency than Portkey: ${verdict.join("; ")}.`,
        "All processes share the machine's cores with the load generator; compare targets within one run."
      ]
    })
  } finally {
    await Promise.all(children.map(stop))
    rmSync(dataDir, { recursive: true, force: true })
  }
}
