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
 * no process runs). The rows take turns in rounds so that they all see the same machine load.
 *
 * Wall-clock rates depend on what else the machine runs. So the bench also counts CPU time per
 * attempt — this process plus its reaped children (utime/stime/cutime/cstime of /proc/self/stat),
 * plus the API-server double's process for k8s — and reports `cpu_bound_attempts_per_s`
 * = cores / CPU seconds per attempt: what the same work sustains on otherwise idle cores.
 *
 * Adding the controller later is one more `measure(...)` row: a function that runs one attempt.
 */
import { HarnessSpec, KubernetesHarnessSpec, Task } from "@reins/protocol"
import { type AttemptSpec, type Launcher, makeKubernetesLauncher, makeLocalLauncher } from "@reins/rollout"
import { Effect } from "effect"
import { Context, Layer } from "effect"
import { ActorSystem } from "@reins/runtime"
import { AttemptLedger, launcherActorLayer, RolloutController } from "../packages/rollout/src/controller/index.js"
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { percentile, writeReport } from "./report.js"

interface Measured {
  readonly attempts_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly failures: number
  /** CPU ms per attempt: this process + reaped children (+ the API-server double for k8s). */
  readonly cpu_ms: number
  /** CPU ms per attempt of this process alone: the launcher's own cost (spawning included). */
  readonly parent_cpu_ms: number
}

const TICK_MS = 10 // USER_HZ = 100 on Linux

/** CPU ms used so far by a process (and, for ourselves, by the children we reaped). */
const cpuMs = (pid: number | "self", withChildren: boolean): number => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number)
    // fields 14..17 of stat (utime stime cutime cstime) are at 11..14 after the command name
    return (f[11]! + f[12]! + (withChildren ? f[13]! + f[14]! : 0)) * TICK_MS
  } catch {
    return NaN
  }
}

let extraCpu: () => number = () => 0

/** Raw numbers of one batch; batches of the same row are merged (rows take turns, see below). */
interface Batch {
  readonly n: number
  readonly wallS: number
  readonly latencies: ReadonlyArray<number>
  readonly failures: number
  readonly cpuMs: number
  readonly parentCpuMs: number
}

/** Runs `one` `n` times with `concurrency` in flight. */
const batch = (n: number, concurrency: number, one: () => Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    const latencies: Array<number> = []
    let failures = 0
    const cpu0 = cpuMs("self", true) + extraCpu()
    const parent0 = process.cpuUsage()
    const t0 = performance.now()
    yield* Effect.forEach(
      Array.from({ length: n }),
      () =>
        Effect.suspend(() => {
          const s = performance.now()
          return one().pipe(Effect.tap((ok) => Effect.sync(() => {
            latencies.push(performance.now() - s)
            if (!ok) failures++
          })))
        }),
      { concurrency, discard: true }
    )
    const parent = process.cpuUsage(parent0)
    return {
      n,
      wallS: (performance.now() - t0) / 1000,
      latencies,
      failures,
      cpuMs: cpuMs("self", true) + extraCpu() - cpu0,
      parentCpuMs: (parent.user + parent.system) / 1000
    } satisfies Batch
  })

const summarize = (batches: ReadonlyArray<Batch>): Measured => {
  const sum = (f: (b: Batch) => number) => batches.reduce((a, b) => a + f(b), 0)
  const n = sum((b) => b.n)
  const latencies = batches.flatMap((b) => b.latencies)
  return {
    attempts_per_s: n / sum((b) => b.wallS),
    p50_ms: percentile(latencies, 50),
    p99_ms: percentile(latencies, 99),
    failures: sum((b) => b.failures),
    cpu_ms: sum((b) => b.cpuMs) / n,
    parent_cpu_ms: sum((b) => b.parentCpuMs) / n
  }
}

/**
 * The floor: spawn and wait for exit, nothing else. Detached like the launcher's harnesses: with
 * the kernel's autogroup scheduling each new session gets its own CPU share, so a non-detached
 * baseline would be slower on a busy machine for reasons that have nothing to do with reins.
 */
const bareSpawn = Effect.async<boolean>((resume) => {
  const c = spawn(process.execPath, ["-e", ""], { stdio: "ignore", detached: true })
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
  new Promise<{ url: string; pid: number; stop: () => void }>((resolve, reject) => {
    const script = fileURLToPath(new URL("../test/rollout/k8sDoubleServer.ts", import.meta.url))
    const child = spawn(process.execPath, ["--import", "tsx", script], { stdio: ["pipe", "pipe", "inherit"] })
    child.once("error", reject)
    child.stdout!.once("data", (d: Buffer) =>
      resolve({ url: JSON.parse(d.toString().split("\n")[0]!).url, pid: child.pid!, stop: () => child.kill("SIGTERM") })
    )
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
          // The Rollout Controller over a local launcher actor (in-process actor system, in-memory
          // ledger): admission, placement, ledger writes and the attempt-finished event on top of `local`.
          const controllerContext = yield* Layer.build(
            RolloutController.layer({ harness: localHarness, endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" } }).pipe(
              Layer.provideMerge(
                Layer.merge(launcherActorLayer({ kind: "local", dataDir: path.join(dataDir, "controller") }, { maxConcurrent: 64 }), AttemptLedger.memory())
              ),
              Layer.provideMerge(ActorSystem.layerLocal())
            )
          )
          const controller = Context.get(controllerContext, RolloutController)
          const viaController = () =>
            controller.submit({ task: new Task({ id: `trivial-${++seq}`, input: null }), size: 1 }).pipe(
              Effect.flatMap((g) => controller.awaitGroup(g.groupId)),
              Effect.map((ended) => ended.every((e) => e.state === "succeeded")),
              Effect.catchAll(() => Effect.succeed(false))
            )
          const k8s = yield* makeKubernetesLauncher({
            dataDir,
            kubeConfig: { _tag: "Server", server: double.url, skipTLSVerify: true, token: "bench" },
            createRate: { perSecond: 10_000, burst: 10_000 }
          })
          const rows = {
            bare_spawn: () => bareSpawn,
            local: () => viaLauncher(local, localHarness),
            k8s: () => viaLauncher(k8s, k8sHarness),
            controller: () => viaController()
          } as const
          // The rows take turns, in rounds, so that all of them see the same machine load (other
          // work on a shared machine comes and goes; one row measured after another would not).
          const names = Object.keys(rows) as Array<keyof typeof rows>
          const withCpu = <A>(name: keyof typeof rows, f: () => Effect.Effect<A>) =>
            Effect.suspend(() => {
              // The double is the API server's work, not the launcher's, but k8s costs it: counted.
              extraCpu = name === "k8s" ? () => cpuMs(double.pid, false) : () => 0
              return f()
            })
          for (const name of names) yield* withCpu(name, () => batch(10, concurrency, rows[name])) // warm-up
          const throughput: Record<string, Array<Batch>> = {}, latency: Record<string, Array<Batch>> = {}
          const rounds = 5
          for (let r = 0; r < rounds; r++) {
            for (const name of names) (throughput[name] ??= []).push(yield* withCpu(name, () => batch(Math.ceil(attempts / rounds), concurrency, rows[name])))
          }
          for (let k = 0; k < latencyRuns; k++) {
            for (const name of names) (latency[name] ??= []).push(yield* withCpu(name, () => batch(1, 1, rows[name])))
          }
          const out: Record<string, { throughput: Measured; latency: Measured }> = {}
          for (const name of names) {
            const t = summarize(throughput[name]!), l = summarize(latency[name]!)
            out[name] = { throughput: t, latency: l }
            console.log(
              `${name}: ${t.attempts_per_s.toFixed(1)} attempts/s at ${concurrency} in flight, ${t.cpu_ms.toFixed(1)} CPU ms/attempt (${t.parent_cpu_ms.toFixed(1)} in this process), p50 ${l.p50_ms.toFixed(1)} ms one at a time`
            )
          }
          return out
        })
      )
    )

    const bare = results.bare_spawn!, local = results.local!, k8s = results.k8s!
    const ctl = results.controller!
    const cores = os.cpus().length
    const row = (m: { throughput: Measured; latency: Measured }, added: number) => ({
      attempts_per_s: m.throughput.attempts_per_s,
      cpu_ms_per_attempt: m.throughput.cpu_ms,
      launcher_process_cpu_ms_per_attempt: m.throughput.parent_cpu_ms,
      cpu_bound_attempts_per_s: (cores * 1000) / m.throughput.cpu_ms,
      added_latency_ms: added,
      latency_p50_ms: m.latency.p50_ms,
      latency_p99_ms: m.latency.p99_ms,
      throughput_p50_ms: m.throughput.p50_ms,
      throughput_p99_ms: m.throughput.p99_ms,
      failures: m.throughput.failures + m.latency.failures
    })
    const json = {
      local: {
        ...row(local, local.latency.p50_ms - bare.latency.p50_ms),
        ratio_to_bare_spawn: local.throughput.attempts_per_s / bare.throughput.attempts_per_s,
        cpu_ratio_to_bare_spawn: local.throughput.cpu_ms / bare.throughput.cpu_ms
      },
      k8s: { ...row(k8s, k8s.latency.p50_ms), against: "API-server double (separate process, Jobs complete in 0 ms)" },
      bare_spawn: row(bare, 0),
      controller: {
        ...row(ctl, ctl.latency.p50_ms - local.latency.p50_ms),
        over: "local launcher actor, in-process actor system, in-memory ledger; added latency = p50(controller) - p50(local launcher)"
      },
      config: { attempts, concurrency, latency_runs: latencyRuns, harness: "node -e ''", load_average_1m_at_end: os.loadavg()[0] },
      goal: {
        local_attempts_per_s: 20,
        met_wall_clock: local.throughput.attempts_per_s >= 20,
        met_cpu_bound: (cores * 1000) / local.throughput.cpu_ms >= 20
      }
    }
    writeReport({
      name: "rollout",
      json,
      table: {
        columns: ["launcher", "attempts/s (wall)", "CPU ms/attempt", "of which launcher process", "attempts/s (CPU-bound)", "p50 latency (ms, 1 in flight)", "added latency (ms)", "p99 latency (ms)", "failures"],
        rows: [
          ["bare spawn", bare.throughput.attempts_per_s, bare.throughput.cpu_ms, bare.throughput.parent_cpu_ms, json.bare_spawn.cpu_bound_attempts_per_s, bare.latency.p50_ms, 0, bare.latency.p99_ms, json.bare_spawn.failures],
          ["local launcher", local.throughput.attempts_per_s, local.throughput.cpu_ms, local.throughput.parent_cpu_ms, json.local.cpu_bound_attempts_per_s, local.latency.p50_ms, json.local.added_latency_ms, local.latency.p99_ms, json.local.failures],
          ["k8s launcher (double)", k8s.throughput.attempts_per_s, k8s.throughput.cpu_ms, k8s.throughput.parent_cpu_ms, json.k8s.cpu_bound_attempts_per_s, k8s.latency.p50_ms, json.k8s.added_latency_ms, k8s.latency.p99_ms, json.k8s.failures],
          ["controller (local)", ctl.throughput.attempts_per_s, ctl.throughput.cpu_ms, ctl.throughput.parent_cpu_ms, json.controller.cpu_bound_attempts_per_s, ctl.latency.p50_ms, json.controller.added_latency_ms, ctl.latency.p99_ms, json.controller.failures]
        ]
      },
      chart: {
        title: `Launch overhead: trivial harness, ${concurrency} in flight`,
        unit: "attempts/s",
        groups: [
          { label: "bare spawn", bars: [{ series: "wall clock", value: bare.throughput.attempts_per_s }, { series: "CPU-bound", value: json.bare_spawn.cpu_bound_attempts_per_s }] },
          { label: "local", bars: [{ series: "wall clock", value: local.throughput.attempts_per_s }, { series: "CPU-bound", value: json.local.cpu_bound_attempts_per_s }] },
          { label: "k8s (double)", bars: [{ series: "wall clock", value: k8s.throughput.attempts_per_s }, { series: "CPU-bound", value: json.k8s.cpu_bound_attempts_per_s }] },
          { label: "controller", bars: [{ series: "wall clock", value: ctl.throughput.attempts_per_s }, { series: "CPU-bound", value: json.controller.cpu_bound_attempts_per_s }] }
        ]
      },
      notes: [
        `${attempts} attempts with ${concurrency} in flight for attempts/s; ${latencyRuns} attempts one at a time for latency.`,
        `local/bare spawn: throughput ratio ${json.local.ratio_to_bare_spawn.toFixed(2)}, CPU ratio ${json.local.cpu_ratio_to_bare_spawn.toFixed(2)}.`,
        `goal ≥ 20 local attempts/s: wall clock ${json.goal.met_wall_clock ? "met" : "NOT met"}, CPU-bound (${cores} idle cores) ${json.goal.met_cpu_bound ? "met" : "NOT met"}; 1-minute load average at the end: ${os.loadavg()[0]!.toFixed(1)}.`,
        "CPU ms/attempt counts this process and the children it reaped (+ the double's process for k8s); CPU-bound attempts/s = cores × 1000 / CPU ms per attempt.",
        "added latency: local = p50(local) − p50(bare spawn); k8s = the whole p50 (the double runs Jobs in 0 ms, no process is started).",
        "controller: one group of 1 submitted and awaited through the RolloutController over the local launcher actor (in-process actor system, in-memory ledger); its added latency is over the bare local launcher's p50."
      ]
    })
  } finally {
    double.stop()
    rmSync(dataDir, { recursive: true, force: true })
  }
}
