/**
 * `reins train` with `trainer.lora` as a real process: a collocated run of the test agent trains
 * LoRA adapters for three versions. Its checkpoints are PEFT adapters (no full weights) naming
 * the base, which stays byte-for-byte as it was; each checkpoint loads as base + merged adapter,
 * and the tokens the Gateway sampled at that version have exactly the log-probabilities those
 * merged weights compute — the Gateway served base + adapter through the pause/update/resume.
 * The split schedule does the same with two devices: the training device's adapters, merged, are
 * what the generation device serves after each swap.
 */
import { initBackend, loadModelDir } from "@reins/policy"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { callsAtVersion, exitWithin, maxLogprobGap, workspace, writeTinyRun } from "./trainFixture.js"

const ws = workspace("train-lora")
const split = workspace("train-lora-split")
afterAll(() => {
  ws.cleanup()
  split.cleanup()
})

describe("reins train with LoRA", () => {
  it("trains adapters only, checkpoints them in PEFT layout, and serves base + adapter", async () => {
    // max_staleness 0: v3's update trains groups begun at v2, so v2 always has calls sampled wholly
    // at it (with a bound of 1, a busy machine could fill v3's batch from groups begun at v1, as
    // one CI run did). LoRA serving is what this test checks; staleness is tested elsewhere.
    await writeTinyRun(ws.dir, { max_versions: 3, checkpoint_every: 1, lr: 5e-3, max_staleness: 0, lora: { rank: 4, alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj"] } })
    const base = readFileSync(join(ws.dir, "model", "model.safetensors"))
    const run = ws.reins(["train", "run.json"])
    expect(await exitWithin(run, 400_000), run.output()).toBe(0)

    const runDir = join(ws.dir, "runs", readdirSync(join(ws.dir, "runs"))[0]!)
    const checkpoint = join(runDir, "checkpoints", "v000003")
    expect(readdirSync(checkpoint).sort()).toEqual(["adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors"])
    const adapterConfig = JSON.parse(readFileSync(join(checkpoint, "adapter_config.json"), "utf8"))
    expect(adapterConfig).toMatchObject({ peft_type: "LORA", r: 4, lora_alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj"], reins_policy_version: 3, base_model_name_or_path: join(ws.dir, "model") })
    expect(readFileSync(join(ws.dir, "model", "model.safetensors")).equals(base)).toBe(true)

    await initBackend()
    const baseModel = await Effect.runPromise(loadModelDir(join(ws.dir, "model")))
    const storeFile = join(ws.dir, ".reins", "runs", readdirSync(join(ws.dir, ".reins", "runs"))[0]!, "reins.db")
    expect(existsSync(storeFile)).toBe(true)
    for (const version of [2, 3]) {
      const merged = await Effect.runPromise(loadModelDir(join(runDir, "checkpoints", `v00000${version}`)))
      expect(merged.config.version).toBe(version)
      // The adapters moved the adapted matrices only.
      const moved = (name: string) => Math.max(...merged.weights[name]!.map((v, i) => Math.abs(v - baseModel.weights[name]![i]!)))
      expect(moved("layers.0.attn.wq")).toBeGreaterThan(1e-4)
      expect(moved("layers.0.attn.wk")).toBe(0)
      expect(moved("layers.0.mlp.w1")).toBe(0)
      // Tokens sampled at this version carry the merged weights' log-probabilities.
      const calls = await callsAtVersion(storeFile, version)
      if (version === 2) expect(calls.length).toBeGreaterThan(0) // v3 is the last: nothing may sample with it
      expect(await maxLogprobGap(join(runDir, "checkpoints", `v00000${version}`), calls)).toBeLessThan(1e-3)
      // …and not the base's: the check can tell the two apart.
      if (version === 2) expect(await maxLogprobGap(join(ws.dir, "model"), calls)).toBeGreaterThan(1e-2)
    }
  }, 480_000)

  it("split schedule: the generation device serves the training device's merged adapters after each swap", async () => {
    const lora = { rank: 4, alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj"] }
    await writeTinyRun(split.dir, { schedule: "split", max_versions: 3, checkpoint_every: 1, lr: 5e-3, lora })
    const run = split.reins(["train", "run.json"])
    expect(await exitWithin(run, 400_000), run.output()).toBe(0)
    const runDir = join(split.dir, "runs", readdirSync(join(split.dir, "runs"))[0]!)
    expect(readdirSync(join(runDir, "checkpoints", "v000002")).sort()).toEqual(["adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors"])
    await initBackend()
    const storeFile = join(split.dir, ".reins", "runs", readdirSync(join(split.dir, ".reins", "runs"))[0]!, "reins.db")
    // Sampled wholly at a swapped-in version: the merged checkpoint's logprobs, not the base's. The
    // first such version with calls: with generation never paused, a busy machine can fill v3's
    // batch from rollouts begun before the swap to v2, so that no call starts and ends at v2.
    const sampled = await Promise.all([2, 3].map(async (version) => ({ version, calls: await callsAtVersion(storeFile, version) })))
    const at = sampled.find((s) => s.calls.length > 0)
    expect(at, "calls sampled wholly at version 2 or 3").toBeDefined()
    expect(await maxLogprobGap(join(runDir, "checkpoints", `v00000${at!.version}`), at!.calls)).toBeLessThan(1e-3)
    expect(await maxLogprobGap(join(split.dir, "model"), at!.calls)).toBeGreaterThan(1e-2)
  }, 480_000)
})
