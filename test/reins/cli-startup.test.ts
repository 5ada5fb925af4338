/**
 * What the real compiled CLI process loads, traced by a module resolve hook. Help and version load
 * the bundled command line (dist/cli-bundle/, made by scripts/bundle-cli.mjs) and nothing else. A
 * command that runs loads the compiled CLI: reins's own CLI modules and the libraries of the
 * command line, never the packages a command needs before it runs (the Gateway, the policy, the
 * Trainer, the rollout controller, the runtime) and never the `effect` or `@effect/cli` index
 * modules, each of which pulls in every module of its library. Start-up time is measured by hand
 * (README); this keeps what it depends on from growing back.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runReins } from "../reinsCli.js"

const dir = mkdtempSync(join(tmpdir(), "reins-cli-startup-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const hook = fileURLToPath(new URL("./fixtures/trace-imports.mjs", import.meta.url))

const loadedBy = async (args: ReadonlyArray<string>, code = 0) => {
  const trace = join(dir, `${args.join("-")}.txt`)
  const run = await runReins(args, 60_000, { TRACE_IMPORTS: trace, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import ${hook}` })
  expect(run.code, run.stderr).toBe(code)
  const urls = readFileSync(trace, "utf8").trim().split("\n")
  return { stdout: run.stdout, files: urls.filter((u) => u.startsWith("file:")) }
}

describe("reins start-up", () => {
  it.each(["--help", "status --help", "--version"])("reins %s runs from the bundled command line alone", async (line) => {
    const { stdout, files } = await loadedBy(line.split(" "))
    expect(stdout).toMatch(/reins|0\.1\.0/)
    expect(files.some((u) => u.endsWith("/packages/reins/dist/cli-bundle/bin.mjs"))).toBe(true)
    // nothing but the bin script and the bundle's own files: no node_modules, no reins package
    // (dist/index.js is resolved, not loaded: the bin script asks where `reins` resolves to tell
    // sources from compiled)
    const allowed = /\/packages\/reins\/(bin\/reins\.js|dist\/index\.js|dist\/cli-bundle\/[\w-]+\.mjs)$/
    expect(files.filter((u) => !allowed.test(u))).toEqual([])
  })

  it("a command that runs loads the compiled CLI, and the packages it needs only once it runs", async () => {
    // an unknown option: the command line is parsed and refused, nothing runs
    const { files } = await loadedBy(["status", "--no-such-option"], 1)
    expect(files.some((u) => u.endsWith("/packages/reins/dist/bin.js"))).toBe(true)
    expect(files.filter((u) => u.includes("/cli-bundle/"))).toEqual([])
    expect(files.filter((u) => /\/(packages\/(gateway|policy|trainer|rollout|protocol)|runtime)\/(src|dist)\//.test(u))).toEqual([])
    expect(files.filter((u) => /node_modules\/(@tensorflow|better-sqlite3|@kubernetes)\//.test(u))).toEqual([])
    expect(files.filter((u) => /node_modules\/(effect|@effect\/cli|@effect\/platform)\/dist\/esm\/index\.js$/.test(u))).toEqual([])
  })
})
