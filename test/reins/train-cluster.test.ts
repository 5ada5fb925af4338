/**
 * The same run on several nodes: a `reins node --roles rollout` process runs the harnesses, and
 * `reins train --join` is the gateway+trainer node (with no harness of its own; the device is
 * its own, here training LoRA adapters). The run finishes, every attempt ran on the rollout node,
 * and the checkpoint is the adapter.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { exitWithin, waitFor, workspace, writeTinyRun } from "./trainFixture.js"

const ws = workspace("train-cluster")
afterAll(ws.cleanup)

describe("reins train --join", () => {
  it("trains with harnesses on a separate rollout node", async () => {
    await writeTinyRun(ws.dir, { max_versions: 2, checkpoint_every: 2, lora: { rank: 4, alpha: 8, target_modules: ["q_proj", "v_proj"] } })
    const rollout = ws.reins(["node", "--roles", "rollout", "--listen", "127.0.0.1:0", "--data", "rollout-node"], { REINS_ROLLOUT_CONCURRENCY: "4" })
    await waitFor(() => /listening on (ws:\/\/\S+)/.test(rollout.output()), 60_000, () => `the rollout node\n${rollout.output()}`)
    const address = /listening on (ws:\/\/\S+)/.exec(rollout.output())![1]!
    const train = ws.reins([
      "train", "run.json", "--join", address, "--secret-file", join(ws.dir, "rollout-node", "cluster-secret"), "--node-data", "train-node", "--no-local-rollouts"
    ])
    expect(await exitWithin(train, 200_000), train.output()).toBe(0)
    const runs = join(ws.dir, "runs")
    const summary = JSON.parse(readFileSync(join(runs, readdirSync(runs)[0]!, "summary.json"), "utf8"))
    expect(summary).toMatchObject({ versions: 2, harness_errors: 0 })
    const checkpoint = join(runs, readdirSync(runs)[0]!, "checkpoints", "v000002")
    expect(readdirSync(checkpoint).sort()).toEqual(["adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors"])
    expect(JSON.parse(readFileSync(join(checkpoint, "adapter_config.json"), "utf8"))).toMatchObject({ peft_type: "LORA", r: 4, reins_policy_version: 2 })
    // The harnesses ran on the rollout node (its attempt folders), none on the trainer's.
    const attempts = join(ws.dir, "rollout-node", "rollout", "attempts")
    expect(existsSync(attempts) ? readdirSync(attempts).length : 0).toBeGreaterThanOrEqual(8)
    const dataRuns = join(ws.dir, ".reins", "runs")
    const local = readdirSync(dataRuns).flatMap((id) => {
      const dir = join(dataRuns, id, "rollout", "attempts")
      return existsSync(dir) ? readdirSync(dir) : []
    })
    expect(local).toEqual([])
  }, 300_000)
})
