/**
 * `reins bench [NAME] [-- ARGS...]`: runs the benchmark `bench/NAME.ts` of a reins checkout (the
 * same as `npm run bench -- NAME ARGS...`): its default export `(args) => Promise<void>` measures
 * and writes `bench/results/NAME.{json,md,svg}`. Without NAME, lists the benchmarks. Options of
 * the benchmark go after `--` (e.g. `reins bench sync-vs-async -- --quick`).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { spawn } from "node:child_process"
import { existsSync, readdirSync } from "node:fs"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { failWith } from "./node.js"

export class BenchError extends Data.TaggedError("BenchError")<{ readonly message: string }> {}

/** bench/ of the checkout this CLI runs from (packages/reins/src/cli → the repository root). */
const benchDir = fileURLToPath(new URL("../../../../bench/", import.meta.url))

/** Benchmark names: bench/*.ts except the runner and the report helpers. */
export const availableBenchmarks = (dir: string): ReadonlyArray<string> =>
  existsSync(dir)
    ? readdirSync(dir)
      .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts") && !["run.ts", "report.ts"].includes(f))
      .map((f) => f.slice(0, -3))
      .sort()
    : []

const runBenchmark = (name: Option.Option<string>, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const names = availableBenchmarks(benchDir)
    if (names.length === 0) {
      return yield* new BenchError({ message: `no benchmarks found in ${benchDir}: reins bench runs the benchmarks of a reins source checkout` })
    }
    if (Option.isNone(name)) {
      yield* Console.log(`benchmarks (reins bench NAME [-- ARGS...]): ${names.join(", ")}`)
      return
    }
    if (!names.includes(name.value)) {
      return yield* new BenchError({ message: `unknown benchmark ${JSON.stringify(name.value)}; available: ${names.join(", ")}` })
    }
    if (!import.meta.url.endsWith(".ts")) {
      // The compiled CLI: a benchmark is TypeScript of this checkout, importing its sources, so
      // it runs as `npm run bench` runs it: this command again, from the sources.
      const code = yield* fromSources([name.value, "--", ...args])
      if (code !== 0) return yield* new BenchError({ message: `benchmark ${name.value} exited with code ${code}` })
      return
    }
    const file = pathToFileURL(path.join(benchDir, `${name.value}.ts`)).href
    const mod = yield* Effect.tryPromise({
      try: () => import(file) as Promise<{ default?: unknown }>,
      catch: (e) => new BenchError({ message: `cannot load ${file}: ${e instanceof Error ? e.message : String(e)}` })
    })
    const main = mod.default
    if (typeof main !== "function") return yield* new BenchError({ message: `${file} has no default export (args) => Promise<void>` })
    yield* Effect.tryPromise({
      try: () => (main as (args: ReadonlyArray<string>) => Promise<void>)(args),
      catch: (e) => new BenchError({ message: e instanceof Error ? e.message : String(e) })
    })
  })

/** `reins bench ARGS` under `--conditions=reins-source` (bin/reins.js then runs the sources through tsx). */
const fromSources = (args: ReadonlyArray<string>) =>
  Effect.async<number>((resume) => {
    const bin = fileURLToPath(new URL("../../bin/reins.js", import.meta.url))
    const env = { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --conditions=reins-source`.trim() }
    const child = spawn(process.execPath, [bin, "bench", ...args], { stdio: "inherit", env })
    child.on("error", () => resume(Effect.succeed(1)))
    child.on("exit", (code, signal) => resume(Effect.succeed(code ?? (signal ? 1 : 0))))
  })

const name = Args.text({ name: "name" }).pipe(Args.optional, Args.withDescription("The benchmark (bench/NAME.ts); omit to list them."))
const rest = Args.text({ name: "args" }).pipe(Args.repeated, Args.withDescription("Arguments of the benchmark, after --."))

export const bench = Command.make("bench", { name, rest }, (a) => runBenchmark(a.name, a.rest).pipe(failWith("reins bench"))).pipe(
  Command.withDescription("Run a benchmark of this checkout (bench/NAME.ts); results go to bench/results/.")
)
