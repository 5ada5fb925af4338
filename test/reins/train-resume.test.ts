/**
 * `reins train` as a real process, killed with SIGKILL in the middle of a collocated run and
 * started again with `--resume`: it continues from its newest checkpoint (the lost versions are
 * redone, none is recorded twice), reaches `max_versions` and writes its summary and report.
 * The resumed process serves the checkpoint's weights: the log-probabilities it recorded for the
 * tokens it sampled at the checkpoint's version are those the checkpoint's tensors compute.
 */
import { initBackend } from "@reins/policy"
import { VersionMetrics } from "@reins/protocol"
import { readJsonl } from "@reins/trainer"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { basename, join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { callsAtVersion, exitWithin, maxLogprobGap, waitFor, workspace, writeTinyRun } from "./trainFixture.js"

const ws = workspace("train-resume")
afterAll(ws.cleanup)

/** Same weights: the engine's logprobs and a forward pass agree to ~1e-6 here (test/policy/engine.test.ts holds them to 1e-4). */
const SAME_WEIGHTS = 1e-3

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
    // Killed by the signal, mid-run: it had not reached max_versions nor written its summary.
    expect(first.child.signalCode, first.output()).toBe("SIGKILL")
    expect(existsSync(join(runDir(), "summary.json"))).toBe(false)
    expect(existsSync(join(runDir(), "checkpoints", "v000004.cursor.json"))).toBe(false)

    const resumedAt = Date.now()
    const second = ws.reins(["train", "run.json", "--resume", runDir()])
    expect(await exitWithin(second, 150_000), second.output()).toBe(0)
    // Version 2 or 3: whatever the first process had checkpointed when the kill reached it.
    const resumed = Number(/resuming from version (\d+)/.exec(second.output())?.[1])
    expect(resumed, second.output()).toBeGreaterThanOrEqual(2)
    expect(resumed).toBeLessThan(4)
    // Its progress counts the run's updates as max_versions does, the first process's included.
    expect(second.output()).toContain(`] ${resumed + 1}/4 v${resumed + 1} `)
    expect(second.output()).toContain("] 4/4 v4 ")
    expect(second.output()).toMatch(new RegExp(`done: 4 versions \\(${4 - resumed} by this process\\) in \\d+ s`))

    const metrics = await Effect.runPromise(readJsonl(join(runDir(), "metrics.jsonl"), VersionMetrics))
    expect(metrics.map((m) => m.version)).toEqual([1, 2, 3, 4])
    const summary = JSON.parse(readFileSync(join(runDir(), "summary.json"), "utf8"))
    expect(summary).toMatchObject({ versions: 4, harness_errors: 0, context_full_calls: 0 })
    expect(existsSync(join(runDir(), "report.md"))).toBe(true)
    expect(existsSync(join(runDir(), "checkpoints", "v000004", "model.safetensors"))).toBe(true)

    // What the resumed process served before its first update came from the checkpoint's tensors,
    // not from the model directory it started with (the base policy).
    const calls = await callsAtVersion(join(ws.dir, ".reins", "runs", basename(runDir()), "reins.db"), resumed, resumedAt)
    expect(calls.length).toBeGreaterThan(0)
    await initBackend()
    const checkpoint = join(runDir(), "checkpoints", `v${String(resumed).padStart(6, "0")}`)
    const fromCheckpoint = await maxLogprobGap(checkpoint, calls)
    const fromBase = await maxLogprobGap(join(ws.dir, "model"), calls)
    console.log(`resumed at v${resumed}: ${calls.length} calls; max logprob gap ${fromCheckpoint.toExponential(2)} to the checkpoint, ${fromBase.toExponential(2)} to the base`)
    expect(fromCheckpoint).toBeLessThan(SAME_WEIGHTS)
    // The tolerance tells the two apart: two updates moved these logprobs far past it (~7e-2).
    expect(fromBase).toBeGreaterThan(SAME_WEIGHTS)
  }, 320_000)
})
