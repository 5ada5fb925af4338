/**
 * `reins train` with `trainer.lora` as a real process: a collocated run of the test agent trains
 * LoRA adapters for three versions. Its checkpoints are PEFT adapters (no full weights) naming
 * the base, which stays byte-for-byte as it was; each checkpoint loads as base + merged adapter,
 * and the tokens the Gateway sampled at that version have exactly the log-probabilities those
 * merged weights compute — the Gateway served base + adapter through the pause/update/resume.
 */
import { SqliteStore, Store } from "@reins/gateway"
import { initBackend, loadModelDir, scoreSequences, Transformer } from "@reins/policy"
import type { LlmCall } from "@reins/protocol"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { exitWithin, workspace, writeTinyRun } from "./trainFixture.js"

const ws = workspace("train-lora")
afterAll(ws.cleanup)

const callsAt = (storeFile: string, version: number) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<LlmCall> = []
      for (const r of (yield* store.rollouts({ limit: 500 })).rollouts) {
        for (const c of (yield* store.rollout(r.id)).calls) if (c.status === 200 && c.outputIds.length > 0 && c.versions.every((v) => v === version)) calls.push(c)
      }
      return calls
    }).pipe(Effect.provide(SqliteStore.layer({ filename: storeFile })))
  )

/** Largest |recorded − computed| logprob over the calls' sampled tokens, with `dir`'s weights. */
const logprobGap = (dir: { readonly config: Transformer["config"]; readonly weights: Record<string, Float32Array> }, calls: ReadonlyArray<LlmCall>) => {
  const model = Transformer.fromWeights(dir.config, dir.weights)
  let gap = 0
  for (const c of calls) {
    const tokens = Int32Array.from([...c.promptIds, ...c.outputIds])
    const [lp] = scoreSequences(model, [{ tokens, weights: new Float32Array(tokens.length) }], { maxTokens: 4096, maxSeqLen: dir.config.contextLength })
    for (let i = 0; i < c.outputIds.length; i++) gap = Math.max(gap, Math.abs(lp![c.promptIds.length + i]! - c.logprobs[i]!))
  }
  model.dispose()
  return gap
}

describe("reins train with LoRA", () => {
  it("trains adapters only, checkpoints them in PEFT layout, and serves base + adapter", async () => {
    await writeTinyRun(ws.dir, { max_versions: 3, checkpoint_every: 1, lr: 5e-3, lora: { rank: 4, alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj"] } })
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
      const calls = await callsAt(storeFile, version)
      if (version === 2) expect(calls.length).toBeGreaterThan(0) // v3 is the last: nothing may sample with it
      expect(logprobGap(merged, calls)).toBeLessThan(1e-3)
      // …and not the base's: the check can tell the two apart.
      if (version === 2) expect(logprobGap(baseModel, calls)).toBeGreaterThan(1e-2)
    }
  }, 480_000)
})
