/**
 * What `reins --help` and `reins status --help` load, traced by a module resolve hook in the real
 * compiled CLI process: reins's own CLI modules and the libraries of the command line, never the
 * packages a command needs once it runs (the Gateway, the policy, the Trainer, the rollout
 * controller, the runtime) and never the `effect` or `@effect/cli` index modules, each of which
 * pulls in every module of its library. Start-up time is measured by hand (README); this keeps
 * what it depends on from growing back.
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

const loadedBy = async (args: ReadonlyArray<string>) => {
  const trace = join(dir, `${args.join("-")}.txt`)
  const run = await runReins(args, 60_000, { TRACE_IMPORTS: trace, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import ${hook}` })
  expect(run.code, run.stderr).toBe(0)
  return { stdout: run.stdout, urls: readFileSync(trace, "utf8").trim().split("\n") }
}

describe("reins start-up", () => {
  it.each([["--help"], ["status", "--help"]])("reins %s loads only the command line", async (...args) => {
    const { stdout, urls } = await loadedBy(args)
    expect(stdout).toContain("reins")
    // It ran compiled, as installed, and the trace saw it.
    expect(urls.some((u) => u.endsWith("/packages/reins/dist/bin.js"))).toBe(true)
    expect(urls.filter((u) => /\/(packages\/(gateway|policy|trainer|rollout|protocol)|runtime)\/(src|dist)\//.test(u))).toEqual([])
    expect(urls.filter((u) => /node_modules\/(@tensorflow|better-sqlite3|@kubernetes)\//.test(u))).toEqual([])
    expect(urls.filter((u) => /node_modules\/(effect|@effect\/cli|@effect\/platform)\/dist\/esm\/index\.js$/.test(u))).toEqual([])
  })
})
