/** Shared by the `reins train` process tests: a tiny policy, a task set, a run config, child processes with bounded lifetimes. */
import { SqliteStore, Store } from "@reins/gateway"
import { defaultModelConfig, defaultTokenizer, initModelDir, loadModelDir, scoreSequences, Transformer } from "@reins/policy"
import type { LlmCall } from "@reins/protocol"
import { Effect } from "effect"
import { killReinsChildren, type ReinsChild, spawnReins } from "../reinsCli.js"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const fixture = (name: string) => fileURLToPath(new URL(`../trainer/fixtures/${name}`, import.meta.url))

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A workspace in a temp dir: `reins` runs there; `cleanup` kills every child still running and removes the dir. */
export const workspace = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), `reins-${prefix}-`))
  const reins = (args: ReadonlyArray<string>, env: Record<string, string> = {}): ReinsChild => spawnReins(args, { cwd: dir, env })
  const cleanup = () => {
    killReinsChildren()
    rmSync(dir, { recursive: true, force: true })
  }
  return { dir, reins, cleanup }
}

/** Waits (bounded) until `check` holds. */
export const waitFor = async (check: () => boolean, ms: number, what: () => string) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what()}`)
    await sleep(100)
  }
}

/** Waits for a child's exit, at most `ms`; "timeout" otherwise. */
export const exitWithin = (c: ReinsChild, ms: number) => Promise.race([c.exited, sleep(ms).then(() => "timeout" as const)])

/** Writes a tiny policy (`model/`), 40 tasks and `run.json` (a collocated run of the test agent) into `dir`. */
export const writeTinyRun = async (dir: string, trainer: Record<string, unknown>) => {
  const tokenizer = defaultTokenizer()
  await Effect.runPromise(initModelDir(join(dir, "model"), {
    tokenizer,
    config: defaultModelConfig(tokenizer.vocabSize, { dModel: 32, nLayers: 1, nHeads: 2, dFf: 64, contextLength: 256 })
  }))
  writeFileSync(join(dir, "tasks.jsonl"), Array.from({ length: 40 }, (_, i) => JSON.stringify({ id: `t${i}`, input: { i } })).join("\n"))
  writeFileSync(join(dir, "run.json"), JSON.stringify({
    name: "tiny",
    model: "model",
    tasks: "tasks.jsonl",
    // Niceness 0, not the launcher's default 19: on a machine other work keeps busy, agents at 19
    // get next to no CPU and time out before a version is trained (as in the schedules test).
    harness: {
      command: [process.execPath, fixture("agent.mjs")],
      timeout_s: 60,
      grace_s: 1,
      nice: 0,
      verifier: { command: [process.execPath, fixture("verifier.mjs")], timeout_s: 20, nice: 0 }
    },
    trainer: { batch_groups: 2, group_size: 2, async_groups: 3, max_staleness: 1, lr: 1e-3, micro_batch_tokens: 2048, ...trainer },
    concurrency: 4,
    eval: { enabled: false }
  }))
}

/** The successful calls of a run's store whose output tokens were all sampled by `version` (and received from `since` on). */
export const callsAtVersion = (storeFile: string, version: number, since = 0) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<LlmCall> = []
      for (const r of (yield* store.rollouts({ limit: 500 })).rollouts) {
        for (const c of (yield* store.rollout(r.id)).calls) {
          if (c.status === 200 && c.timings.receivedAt >= since && c.outputIds.length > 0 && c.versions.every((v) => v === version)) calls.push(c)
        }
      }
      return calls
    }).pipe(Effect.provide(SqliteStore.layer({ filename: storeFile })))
  )

/**
 * Largest |recorded − computed| logprob over the calls' output tokens, with the weights of model
 * directory `dir` (a LoRA checkpoint: its base with the adapter merged). The TensorFlow.js
 * backend must be initialised.
 */
export const maxLogprobGap = async (dir: string, calls: ReadonlyArray<LlmCall>) => {
  const loaded = await Effect.runPromise(loadModelDir(dir))
  const model = Transformer.fromWeights(loaded.config, loaded.weights)
  let gap = 0
  for (const c of calls) {
    const tokens = Int32Array.from([...c.promptIds, ...c.outputIds])
    const [lp] = await scoreSequences(model, [{ tokens, weights: new Float32Array(tokens.length) }], { maxTokens: 4096, maxSeqLen: loaded.config.contextLength })
    for (let i = 0; i < c.outputIds.length; i++) gap = Math.max(gap, Math.abs(lp![c.promptIds.length + i]! - c.logprobs[i]!))
  }
  model.dispose()
  return gap
}
