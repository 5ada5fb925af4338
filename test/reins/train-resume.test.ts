/**
 * `reins train` as a real process, killed with SIGKILL in the middle of a collocated run and
 * started again with `--resume`: it continues from its newest checkpoint (the lost versions are
 * redone, none is recorded twice), reaches `max_versions` and writes its summary and report.
 */
import { VersionMetrics } from "@reins/protocol"
import { readJsonl } from "@reins/trainer"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { exitWithin, waitFor, workspace, writeTinyRun } from "./trainFixture.js"

const ws = workspace("train-resume")
afterAll(ws.cleanup)

describe("reins train", () => {
  it("resumes from its newest checkpoint after kill -9, without recording a version twice", async () => {
    await writeTinyRun(ws.dir, { max_versions: 4, checkpoint_every: 1 })
    const first = ws.reins(["train", "run.json"])
    const runs = join(ws.dir, "runs")
    const runDir = () => join(runs, readdirSync(runs)[0]!)
    await waitFor(
      () => existsSync(runs) && readdirSync(runs).length > 0 && existsSync(join(runDir(), "checkpoints", "v000002.cursor.json")),
      150_000,
      () => `a checkpoint of version 2\n${first.output()}`
    )
    first.child.kill("SIGKILL")
    await first.exited

    const second = ws.reins(["train", "run.json", "--resume", runDir()])
    expect(await exitWithin(second, 150_000), second.output()).toBe(0)
    expect(second.output()).toMatch(/resuming from version [2-4]/)

    const metrics = await Effect.runPromise(readJsonl(join(runDir(), "metrics.jsonl"), VersionMetrics))
    expect(metrics.map((m) => m.version)).toEqual([1, 2, 3, 4])
    const summary = JSON.parse(readFileSync(join(runDir(), "summary.json"), "utf8"))
    expect(summary).toMatchObject({ versions: 4, harness_errors: 0, context_full_calls: 0 })
    expect(existsSync(join(runDir(), "report.md"))).toBe(true)
    expect(existsSync(join(runDir(), "checkpoints", "v000004", "model.safetensors"))).toBe(true)
  }, 320_000)
})
