/**
 * reins as a user meets it: every workspace package is packed (`npm pack`) and the tarballs are
 * installed into a scratch project in a temp folder — no workspace links, nothing from this
 * repository's node_modules on the resolution path, nothing downloaded. The scratch project gets a
 * lockfile made from this repository's (the tarballs in place of the workspace links, the other
 * run-time dependencies as they are locked here), so `npm ci --offline` takes every package from
 * npm's cache, which holds them since this repository was installed: without a lockfile npm would
 * ask the registry for each package's metadata, which `npm ci` does not cache. From there, the compiled
 * packages run: `npx reins --help`, `npx reins serve` answering a chat completion from the shipped
 * calc base (its device in a worker thread started from compiled files), and an Effect program
 * that imports `reins` and trains a calc run for two versions on the shipped base
 * (examples/calc of this repository, by path).
 *
 * The install runs with `--ignore-scripts`: the only dependency that builds anything is
 * better-sqlite3 (a minute of C++ compiling that tests nothing of reins), so its compiled addon is
 * copied from this repository's install, which is the same version.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, expect, it } from "vitest"

const repo = fileURLToPath(new URL("../..", import.meta.url))
const calc = join(repo, "examples", "calc")
const WORKSPACES = ["runtime", "packages/protocol", "packages/policy", "packages/gateway", "packages/rollout", "packages/trainer", "packages/reins"]

const dir = mkdtempSync(join(tmpdir(), "reins-installed-"))
const project = join(dir, "project")
const children = new Set<ChildProcess>()

/**
 * The environment of everything this test starts: `--conditions=reins-source` (which makes reins
 * run from its TypeScript sources, set when the tests do: REINS_TEST_SOURCES=1) removed, so the
 * installed, compiled packages run as they would for a user.
 */
const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const e: NodeJS.ProcessEnv = { ...process.env, ...extra }
  const options = (e.NODE_OPTIONS ?? "").replace(/--conditions[= ]reins-source/g, "").trim()
  if (options === "") delete e.NODE_OPTIONS
  else e.NODE_OPTIONS = options
  return e
}

const run = (command: string, args: ReadonlyArray<string>, cwd: string, timeoutMs: number) => {
  try {
    return execFileSync(command, args, { cwd, env: env(), encoding: "utf8", timeout: timeoutMs, stdio: ["ignore", "pipe", "pipe"] })
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message: string }
    throw new Error(`${command} ${args.join(" ")} failed: ${err.message}\n${err.stdout ?? ""}\n${err.stderr ?? ""}`)
  }
}

/** Starts `command` in its own process group (npx's children are killed with it). */
const start = (command: string, args: ReadonlyArray<string>, extraEnv: Record<string, string> = {}) => {
  const child = spawn(command, args, { cwd: project, env: env(extraEnv), stdio: ["ignore", "pipe", "pipe"], detached: true })
  children.add(child)
  let output = ""
  child.stdout!.on("data", (d) => (output += d))
  child.stderr!.on("data", (d) => (output += d))
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => (children.delete(child), resolve(code))))
  return { child, exited, output: () => output }
}

const killGroup = (child: ChildProcess, signal: NodeJS.Signals) => {
  try {
    process.kill(-child.pid!, signal)
  } catch {
    // already gone
  }
}

/** Waits (bounded) for `pattern` in a child's output. */
const waitFor = async (c: ReturnType<typeof start>, pattern: RegExp, ms: number): Promise<RegExpExecArray> => {
  const deadline = Date.now() + ms
  for (;;) {
    const m = pattern.exec(c.output())
    if (m) return m
    if (c.child.exitCode !== null || c.child.signalCode !== null) throw new Error(`exited before ${pattern}:\n${c.output()}`)
    if (Date.now() > deadline) throw new Error(`no ${pattern} within ${ms} ms:\n${c.output()}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

interface Locked {
  readonly version?: string
  readonly link?: boolean
  readonly dev?: boolean
  readonly [field: string]: unknown
}

/**
 * The scratch project's lockfile: this repository's run-time entries (dev-only ones and the
 * workspace links left out), and each packed workspace package as its tarball with the
 * dependencies it declares.
 */
const scratchLockfile = (dependencies: Record<string, string>, packed: ReadonlyArray<{ name: string; version: string; filename: string; integrity: string }>) => {
  const lock = JSON.parse(readFileSync(join(repo, "package-lock.json"), "utf8")) as { packages: Record<string, Locked> }
  const packages: Record<string, unknown> = { "": { name: "my-agent", dependencies } }
  for (const [path, entry] of Object.entries(lock.packages)) if (path.startsWith("node_modules/") && !entry.link && !entry.dev) packages[path] = entry
  for (const p of packed) {
    // The repository's link entry names the workspace folder whose entry holds what it declares.
    const link = lock.packages[`node_modules/${p.name}`]
    const workspace = link?.link === true ? lock.packages[String(link.resolved)] : undefined
    if (workspace === undefined) throw new Error(`package-lock.json has no workspace entry for ${p.name}`)
    const { name: _name, ...declared } = workspace
    packages[`node_modules/${p.name}`] = { ...declared, version: p.version, resolved: `file:../tarballs/${p.filename}`, integrity: p.integrity }
  }
  return { name: "my-agent", lockfileVersion: 3, requires: true, packages }
}

/**
 * Prints, as one JSON array, what the full command line (the module argv[2]) writes to stdout
 * for each argument list of argv[3], run one after another in this process.
 */
const FULL_HELP = `
import { pathToFileURL } from "node:url"
import * as Effect from "effect/Effect"
import * as NodeContext from "@effect/platform-node/NodeContext"
const { cli } = await import(pathToFileURL(process.argv[2]).href)
const write = process.stdout.write
const outputs = []
for (const args of JSON.parse(process.argv[3])) {
  let text = ""
  process.stdout.write = (chunk) => ((text += chunk), true)
  try {
    await Effect.runPromise(cli(["node", "reins", ...args]).pipe(Effect.provide(NodeContext.layer)))
  } finally {
    process.stdout.write = write
  }
  outputs.push(text)
}
write.call(process.stdout, JSON.stringify(outputs))
`

const timings: Record<string, number> = {}
const timed = <A>(name: string, f: () => A): A => {
  const t0 = performance.now()
  try {
    return f()
  } finally {
    timings[name] = Math.round(performance.now() - t0)
  }
}

beforeAll(() => {
  // dist/ as the sources are now (incremental: a few seconds when nothing changed).
  timed("build", () => run("npm", ["run", "build", "--silent"], repo, 600_000))
  const tarballs = join(dir, "tarballs")
  mkdirSync(tarballs)
  const packed = JSON.parse(timed("pack", () =>
    run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", tarballs, ...WORKSPACES.flatMap((w) => ["-w", w])], repo, 300_000)
  )) as Array<{ name: string; version: string; filename: string; integrity: string }>
  expect(packed.map((p) => p.name).sort()).toEqual(["@reins/gateway", "@reins/policy", "@reins/protocol", "@reins/rollout", "@reins/runtime", "@reins/trainer", "reins"])
  const effect = (JSON.parse(readFileSync(join(repo, "runtime", "package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies.effect!
  // Every reins package from its tarball (they are not on the registry), and effect for the program.
  const dependencies = { ...Object.fromEntries(packed.map((p) => [p.name, `file:../tarballs/${p.filename}`])), effect }
  mkdirSync(project)
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "my-agent", private: true, type: "module", dependencies }, null, 2))
  writeFileSync(join(project, "package-lock.json"), JSON.stringify(scratchLockfile(dependencies, packed), null, 2))
  timed("install", () => run("npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], project, 600_000))
  // better-sqlite3's compiled addon (see the top of the file), after checking it is the same version.
  const version = (root: string) => (JSON.parse(readFileSync(join(root, "node_modules", "better-sqlite3", "package.json"), "utf8")) as { version: string }).version
  expect(version(project)).toBe(version(repo))
  cpSync(join(repo, "node_modules", "better-sqlite3", "build", "Release", "better_sqlite3.node"), join(project, "node_modules", "better-sqlite3", "build", "Release", "better_sqlite3.node"))
}, 900_000)

afterAll(async () => {
  for (const child of children) killGroup(child, "SIGKILL")
  rmSync(dir, { recursive: true, force: true })
  console.log(`installed reins: ${JSON.stringify(timings)} ms`)
})

it("installs as compiled JavaScript: no workspace links, no TypeScript, no tsx", () => {
  const installed = join(project, "node_modules", "reins")
  expect(existsSync(join(installed, "dist", "index.js"))).toBe(true)
  expect(existsSync(join(installed, "dist", "index.d.ts"))).toBe(true)
  expect(existsSync(join(installed, "src"))).toBe(false)
  expect(existsSync(join(project, "node_modules", "tsx"))).toBe(false)
  // The run-time files beside the compiled modules.
  expect(existsSync(join(project, "node_modules", "@reins", "runtime", "dist", "worker-bootstrap.mjs"))).toBe(true)
  expect(existsSync(join(project, "node_modules", "@reins", "policy", "dist", "chat", "chat_template.jinja"))).toBe(true)
  expect(existsSync(join(project, "node_modules", "@reins", "rollout", "dist", "process", "spawner-child.mjs"))).toBe(true)
  expect(existsSync(join(project, "node_modules", "@reins", "gateway", "dist", "store", "sqlite", "checkpointer.mjs"))).toBe(true)
})

it("npx reins --help", { timeout: 120_000 }, () => {
  const help = timed("help", () => run("npx", ["--offline", "reins", "--help"], project, 60_000))
  for (const command of ["train", "serve", "eval", "sft", "export", "node", "status"]) expect(help).toContain(command)
})

it("help and version come from the bundled command line, word for word what the full one prints", { timeout: 120_000 }, () => {
  const installed = join(project, "node_modules", "reins")
  const bundled = (args: ReadonlyArray<string>) => run("node", [join(installed, "dist", "cli-bundle", "bin.mjs"), ...args], project, 30_000)
  const commands = ["start", "node", "status", "rollouts", "ui", "tokenizer", "serve", "sft", "train", "eval", "export", "bench"]
  const cases = [["--help"], ["--version"], ...commands.map((c) => [c, "--help"])]
  // The full command line (dist/cli/main.js, what dist/bin.js runs) renders every case in one
  // process: loading it once instead of once per case saves ~30 s of a busy machine's CPU.
  writeFileSync(join(project, "help-full.mjs"), FULL_HELP)
  const full = JSON.parse(run("node", ["help-full.mjs", join(installed, "dist", "cli", "main.js"), JSON.stringify(cases)], project, 60_000)) as Array<string>
  expect(full).toHaveLength(cases.length)
  cases.forEach((args, i) => {
    expect(full[i], args.join(" ")).toMatch(/\S/) // something printed: an empty capture would match an empty bundle
    expect(bundled(args), args.join(" ")).toBe(full[i])
  })
  // the bundle holds the command line, not reins's packages: they stay imports of the installed ones
  const chunks = readdirSync(join(installed, "dist", "cli-bundle"))
  const text = chunks.map((f) => readFileSync(join(installed, "dist", "cli-bundle", f), "utf8")).join("\n")
  expect(text).toMatch(/from\s*"@reins\/runtime"/)
  expect(text).not.toContain("makeRolloutController")
})

it("npx reins serve answers a chat completion from the shipped calc base", { timeout: 180_000 }, async () => {
  const admin = "installed-admin"
  const t0 = performance.now()
  const serve = start("npx", ["--offline", "reins", "serve", "--http", "127.0.0.1:0", "--data", join(project, ".reins"), "--model", join(calc, "base")], {
    REINS_ADMIN_TOKEN: admin
  })
  try {
    const [, url, model] = await waitFor(serve, /listening on (http:\/\/[^\s]+)\/v1 \(model ([^,\s]+),/, 120_000)
    const rollout = (await (await fetch(`${url}/api/rollouts`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ task: {} })
    })).json()) as { base_url: string; attempt_key: string }
    const res = await fetch(`${rollout.base_url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${rollout.attempt_key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "What is 2+3?" }], max_tokens: 8 })
    })
    const body = (await res.json()) as { choices?: Array<{ finish_reason: string }> }
    expect(res.status, JSON.stringify(body)).toBe(200)
    expect(body.choices?.[0]?.finish_reason).toMatch(/stop|length|tool_calls/)
    // the backend the device chose (wasm: no GPU here), in the log and in /metrics
    expect(serve.output()).toContain("runs on the wasm backend")
    expect(await (await fetch(`${url}/metrics`)).text()).toContain('reins_gateway_device_backend{backend="wasm"} 1')
    timings.serve = Math.round(performance.now() - t0)
  } finally {
    killGroup(serve.child, "SIGTERM")
    const timer = setTimeout(() => killGroup(serve.child, "SIGKILL"), 10_000)
    await serve.exited
    clearTimeout(timer)
  }
})

it("an Effect program that imports reins trains calc for two versions on the shipped base", { timeout: 420_000 }, async () => {
  // A run config as a user writes one, pointing at the calc example of this repository by path.
  writeFileSync(join(project, "reins.config.json"), JSON.stringify({
    name: "calc-installed",
    model: join(calc, "base"),
    tasks: join(calc, "tasks", "train.jsonl"),
    // niceness 0: at the default 19 the harnesses starve into their timeouts on a busy machine
    harness: { command: ["node", "harness.mjs"], cwd: calc, timeout_s: 120, grace_s: 2, nice: 0, verifier: { command: ["node", "verify.mjs"], timeout_s: 60, nice: 0 } },
    trainer: { schedule: "collocated", batch_groups: 2, group_size: 4, async_groups: 2, max_staleness: 1, lr: 3e-4, std_scaling: true, max_versions: 2, optimizer_steps: 1, checkpoint_every: 0 },
    concurrency: 8,
    eval: { enabled: false },
    runs_dir: join(project, "runs"),
    data_dir: join(project, ".reins", "runs")
  }, null, 2))
  writeFileSync(join(project, "train.mjs"), `
import { Effect } from "effect"
import { loadRunConfig, Reins } from "reins"

const program = Effect.gen(function* () {
  const { run, trainer } = yield* loadRunConfig("reins.config.json")
  return yield* Effect.gen(function* () {
    const reins = yield* Reins.Reins
    const before = yield* reins.version
    const summary = yield* reins.train(trainer)
    return { before, after: yield* reins.version, versions: summary.versions }
  }).pipe(Effect.provide(Reins.local({ run })))
})

Effect.runPromise(program).then(
  (result) => { console.log("RESULT " + JSON.stringify(result)); process.exit(0) },
  (error) => { console.error(error); process.exit(1) }
)
`)
  const t0 = performance.now()
  const train = start(process.execPath, ["train.mjs"])
  const timer = setTimeout(() => killGroup(train.child, "SIGKILL"), 400_000)
  const code = await train.exited
  clearTimeout(timer)
  timings.train = Math.round(performance.now() - t0)
  const result = /RESULT (.*)/.exec(train.output())
  expect(code, train.output()).toBe(0)
  const { before, after, versions } = JSON.parse(result![1]!) as { before: number; after: number; versions: number }
  expect(versions).toBe(2)
  expect(after).toBe(before + 2)
})
