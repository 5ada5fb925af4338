/**
 * `reins bench`: lists the benchmarks of the checkout, refuses an unknown one with the list, and
 * hands the arguments after `--` to the benchmark — checked with the real CLI process and
 * a benchmark option error, so no benchmark actually runs.
 */
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const reins = fileURLToPath(new URL("../../packages/reins/bin/reins.js", import.meta.url))
const run = (...args: Array<string>) => spawnSync(process.execPath, [reins, "bench", ...args], { encoding: "utf8", timeout: 60_000 })

describe("reins bench", () => {
  it("lists, refuses unknown names, passes arguments on", () => {
    const list = run()
    expect(list.status).toBe(0)
    expect(list.stdout).toMatch(/benchmarks \(reins bench NAME \[-- ARGS\.\.\.\]\): .*sim.*sync-vs-async/)
    const unknown = run("nope")
    expect(unknown.status).toBe(1)
    expect(unknown.stderr).toMatch(/reins bench: unknown benchmark "nope"; available: .*sync-vs-async/)
    // The benchmark parses its own options: a bad one comes back as its error, before any work.
    const bad = run("sync-vs-async", "--", "--tail", "0.5")
    expect(bad.status).toBe(1)
    expect(bad.stderr).toMatch(/reins bench: --tail expects a number >= 1, got "0.5"/)
  }, 120_000)
})
