/**
 * `npm run bench -- rollout [attempts] [concurrency]`: launch overhead of the rollout launchers.
 *
 * A trivial harness (`node -e ""`, exits at once) is started and awaited again and again:
 *   - bare_spawn: `child_process.spawn` + wait for exit, nothing else: the floor;
 *   - local: the local launcher (task files, process group, capped logs, timeout watch, group
 *     sweep, outcome classification);
 *   - k8s: the Kubernetes launcher against the API-server double running in its own process
 *     (create, watch events, fresh pod list, pod-log read); the double "runs" each Job in 0 ms,
 *     so everything measured is launcher + API round trips.
 * Throughput: `attempts` attempts with `concurrency` in flight. Latency: 40 attempts one at a
 * time; `added_latency_ms` is the p50 latency minus bare spawn's (for k8s: the whole p50, since
 * no process runs).
 *
 * Adding the controller later is one more `measure(...)` row: a function that runs one attempt.
 */
import { HarnessSpec, KubernetesHarnessSpec, Task } from "@reins/protocol"
import { type AttemptSpec, type Launcher, makeKubernetesLauncher, makeLocalLauncher } from "@reins/rollout"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { percentile, writeReport } from "./report.js"

interface Measured {
  readonly attempts_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly failures: number
}

/** Runs `one` `n` times with `concurrency` in flight; wall-clock throughput and per-attempt latency. */
const measure = (n: number, concurrency: number, one: (i: number) => Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    const latencies: Array<number> = []
    let failures = 0
    const t0 = performance.now()
    yield* Effect.forEach(
      Array.from({ length: n }, (_, i) => i),
      (i) =>
        Effect.suspend(() => {
          const s = performance.now()
          return one(i).pipe(Effect.tap((ok) => Effect.sync(() => {
            latencies.push(performance.now() - s)
            if (!ok) failures++
          })))
        }),
      { concurrency, discard: true }
    )
    const wall = (performance.now() - t0) / 1000
    return { attempts_per_s: n / wall, p50_ms: percentile(latencies, 50), p99_ms: percentile(latencies, 99), failures } satisfies Measured
  })

const bareSpawn = Effect.async<boolean>((resume) => {
  const c = spawn(process.execPath, ["-e", ""], { stdio: "ignore" })
  c.once("exit", (code) => resume(Effect.succeed(code === 0)))
  c.once("error", () => resume(Effect.succeed(false)))
})

let seq = 0
const attempt = (harness: HarnessSpec): AttemptSpec => {
  const id = `bench-${process.pid}-${++seq}`
  return {
    rolloutId: `r-${id}`,
    attemptId: id,
    attemptKey: `key-${id}`,
    task: new Task({ id: "trivial", input: { n: seq } }),
    harness,
    endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" }
  }
}

const viaLauncher = (launcher: Launcher, harness: HarnessSpec) =>
  Effect.scoped(launcher.launch(attempt(harness)).pipe(Effect.flatMap((h) => h.outcome))).pipe(
    Effect.map((o) => o._tag === "Succeeded"),
    Effect.catchAll(() => Effect.succeed(false))
  )

/** Starts the API-server double in its own process and returns its URL and a stop function. */
const startDouble = () =>
  new Promise<{ url: string; stop: () => void }>((resolve, reject) => {
    const script = fileURLToPath(new URL("../test/rollout/k8sDoubleServer.ts", import.meta.url))
    const child = spawn(process.execPath, ["--import", "tsx", script], { stdio: ["pipe", "pipe", "inherit"] })
    child.once("error", reject)
    child.stdout!.once("data", (d: Buffer) => resolve({ url: JSON.parse(d.toString().split("\n")[0]!).url, stop: () => child.kill("SIGTERM") }))
  })

export default async (args: ReadonlyArray<string>) => {
  const attempts = Number(args[0] ?? 200)
  const concurrency = Number(args[1] ?? 4)
  const latencyRuns = 40
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "reins-bench-rollout-"))
  const double = await startDouble()
  try {
    const localHarness = new HarnessSpec({ command: [process.execPath, "-e", ""], timeout_s: 60, grace_s: 1, max_log_bytes: 1 << 16 })
    const k8sHarness = new HarnessSpec({ command: ["node", "-e", ""], timeout_s: 60, kubernetes: new KubernetesHarnessSpec({ image: "node:20-slim" }) })

    const results = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function*() {
          const local = makeLocalLauncher({ dataDir })
          const k8s = yield* makeKubernetesLauncher({
            dataDir,
            kubeConfig: { _tag: "Server", server: double.url, skipTLSVerify: true, token: "bench" },
            createRate: { perSecond: 10_000, burst: 10_000 }
          })
          const rows = {
            bare_spawn: () => bareSpawn,
            local: () => viaLauncher(local, localHarness),
            k8s: () => viaLauncher(k8s, k8sHarness)
          } as const
          const out: Record<string, { throughput: Measured; latency: Measured }> = {}
          for (const [name, one] of Object.entries(rows)) {
            yield* measure(10, concurrency, one) // warm-up
            const throughput = yield* measure(attempts, concurrency, one)
            const latency = yield* measure(latencyRuns, 1, one)
            out[name] = { throughput, latency }
            console.log(`${name}: ${throughput.attempts_per_s.toFixed(1)} attempts/s at ${concurrency} in flight, p50 ${latency.p50_ms.toFixed(1)} ms one at a time`)
          }
          return out
        })
      )
    )

    const bare = results.bare_spawn!, local = results.local!, k8s = results.k8s!
    const row = (m: { throughput: Measured; latency: Measured }, added: number) => ({
      attempts_per_s: m.throughput.attempts_per_s,
      added_latency_ms: added,
      latency_p50_ms: m.latency.p50_ms,
      latency_p99_ms: m.latency.p99_ms,
      throughput_p50_ms: m.throughput.p50_ms,
      throughput_p99_ms: m.throughput.p99_ms,
      failures: m.throughput.failures + m.latency.failures
    })
    const json = {
      local: { ...row(local, local.latency.p50_ms - bare.latency.p50_ms), ratio_to_bare_spawn: local.throughput.attempts_per_s / bare.throughput.attempts_per_s },
      k8s: { ...row(k8s, k8s.latency.p50_ms), against: "API-server double (separate process, Jobs complete in 0 ms)" },
      bare_spawn: row(bare, 0),
      config: { attempts, concurrency, latency_runs: latencyRuns, harness: "node -e ''" },
      goal: { local_attempts_per_s: 20, met: local.throughput.attempts_per_s >= 20 }
    }
    writeReport({
      name: "rollout",
      json,
      table: {
        columns: ["launcher", "attempts/s", "p50 latency (ms, 1 in flight)", "added latency (ms)", "p99 latency (ms)", "failures"],
        rows: [
          ["bare spawn", bare.throughput.attempts_per_s, bare.latency.p50_ms, 0, bare.latency.p99_ms, json.bare_spawn.failures],
          ["local launcher", local.throughput.attempts_per_s, local.latency.p50_ms, json.local.added_latency_ms, local.latency.p99_ms, json.local.failures],
          ["k8s launcher (double)", k8s.throughput.attempts_per_s, k8s.latency.p50_ms, json.k8s.added_latency_ms, k8s.latency.p99_ms, json.k8s.failures]
        ]
      },
      chart: {
        title: `Launch overhead: trivial harness, ${concurrency} in flight`,
        unit: "attempts/s",
        groups: [
          { label: "bare spawn", bars: [{ series: "attempts/s", value: bare.throughput.attempts_per_s }] },
          { label: "local", bars: [{ series: "attempts/s", value: local.throughput.attempts_per_s }] },
          { label: "k8s (double)", bars: [{ series: "attempts/s", value: k8s.throughput.attempts_per_s }] }
        ]
      },
      notes: [
        `${attempts} attempts with ${concurrency} in flight for attempts/s; ${latencyRuns} attempts one at a time for latency.`,
        `local/bare spawn throughput ratio: ${json.local.ratio_to_bare_spawn.toFixed(2)}; goal ≥ 20 local attempts/s: ${json.goal.met ? "met" : "NOT met"}.`,
        "added latency: local = p50(local) − p50(bare spawn); k8s = the whole p50 (the double runs Jobs in 0 ms, no process is started).",
        "The controller's own overhead is not included yet (it is built on these launchers)."
      ]
    })
  } finally {
    double.stop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}
