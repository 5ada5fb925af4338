/** Shared by the `reins train` process tests: a tiny policy, a task set, a run config, child processes with bounded lifetimes. */
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
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
