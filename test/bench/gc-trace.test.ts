/**
 * The gateway bench's reading of V8's `--trace-gc-nvp` lines, on a real node process that
 * allocates (young-generation scavenges), keeps part of it (bytes promoted to the old generation)
 * and asks for one full collection (a mark-compact).
 */
import { spawnSync } from "node:child_process"
import { describe, expect, it } from "vitest"
import { GC_TRACE_FLAG, summarizeGcTrace } from "../../bench/gcTrace.js"

const WORKLOAD = `
const kept = []
for (let i = 0; i < 200000; i++) {
  const o = { i, s: "x".repeat(i % 64), a: [i, i + 1, i + 2] }
  if (i % 8 === 0) kept.push(o)
}
globalThis.gc()
console.log("kept", kept.length)
`

describe("gc trace summary", () => {
  it("counts a real process's scavenges, their pauses, what they promoted, and its mark-compact", () => {
    const r = spawnSync(process.execPath, [GC_TRACE_FLAG, "--expose-gc", "--max-semi-space-size=1", "-e", WORKLOAD], { encoding: "utf8", timeout: 60_000 })
    expect(r.status).toBe(0)
    expect(r.stdout).toContain("kept 25000")
    const gc = summarizeGcTrace(r.stdout)
    expect(gc.scavenges).toBeGreaterThan(3)
    expect(gc.scavenge_pause_mean_ms).toBeGreaterThan(0)
    expect(gc.scavenge_pause_max_ms).toBeGreaterThanOrEqual(gc.scavenge_pause_mean_ms)
    expect(gc.promoted_kb_per_scavenge).toBeGreaterThan(0)
    expect(gc.mark_compacts).toBeGreaterThanOrEqual(1)
    expect(gc.mark_compact_pause_max_ms).toBeGreaterThan(0)
    // Lines of other output are ignored; an empty trace is all zeros.
    expect(summarizeGcTrace("listening on http://127.0.0.1:1/v1\n")).toEqual({
      scavenges: 0,
      scavenge_pause_mean_ms: 0,
      scavenge_pause_max_ms: 0,
      promoted_kb_per_scavenge: 0,
      mark_compacts: 0,
      mark_compact_pause_max_ms: 0
    })
  }, 60_000)
})
