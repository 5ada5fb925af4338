/**
 * `reins train` as a real process, killed with SIGKILL in the middle of a collocated run and
 * started again with `--resume`: it continues from its newest checkpoint (the lost versions are
 * redone, none is recorded twice), reaches `max_versions` and writes its summary and report.
 */
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
import { VersionMetrics } from "@reins/protocol"
import { readJsonl } from "@reins/trainer"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../..", import.meta.url))
const fixture = (name: string) => fileURLToPath(new URL(`../trainer/fixtures/${name}`, import.meta.url))
const tmp = mkdtempSync(join(tmpdir(), "reins-train-resume-"))
const children = new Set<ChildProcess>()
afterAll(() => {
  for (const child of children) child.kill("SIGKILL")
  rmSync(tmp, { recursive: true, force: true })
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const startTrain = (args: ReadonlyArray<string>) => {
  const child = spawn(process.execPath, [join(root, "packages/reins/bin/reins.js"), "train", ...args], { cwd: tmp, stdio: ["ignore", "pipe", "pipe"] })
  children.add(child)
  let output = ""
  child.stdout!.on("data", (d) => (output += d))
  child.stderr!.on("data", (d) => (output += d))
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  return { child, exited, output: () => output }
}

/** Waits (bounded) until `check` holds. */
const waitFor = async (check: () => boolean, ms: number, what: string) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

describe("reins train", () => {
  it("resumes from its newest checkpoint after kill -9, without recording a version twice", async () => {
    const modelDir = join(tmp, "model")
    const tokenizer = defaultTokenizer()
    await Effect.runPromise(initModelDir(modelDir, {
      tokenizer,
      config: defaultModelConfig(tokenizer.vocabSize, { dModel: 32, nLayers: 1, nHeads: 2, dFf: 64, contextLength: 256 })
    }))
    writeFileSync(join(tmp, "tasks.jsonl"), Array.from({ length: 40 }, (_, i) => JSON.stringify({ id: `t${i}`, input: { i } })).join("\n"))
    writeFileSync(join(tmp, "run.json"), JSON.stringify({
      name: "resume",
      model: "model",
      tasks: "tasks.jsonl",
      harness: {
        command: [process.execPath, fixture("agent.mjs")],
        timeout_s: 60,
        grace_s: 1,
        verifier: { command: [process.execPath, fixture("verifier.mjs")], timeout_s: 20 }
      },
      trainer: { batch_groups: 2, group_size: 2, async_groups: 3, max_staleness: 1, max_versions: 4, checkpoint_every: 1, lr: 1e-3, micro_batch_tokens: 2048 },
      concurrency: 4,
      eval: { enabled: false }
    }))
    const first = startTrain(["run.json"])
    const runs = join(tmp, "runs")
    const runDir = () => join(runs, readdirSync(runs)[0]!)
    await waitFor(() => existsSync(runs) && readdirSync(runs).length > 0 && existsSync(join(runDir(), "checkpoints", "v000002.cursor.json")), 150_000, `a checkpoint of version 2\n${first.output()}`)
    first.child.kill("SIGKILL")
    await first.exited

    const second = startTrain(["run.json", "--resume", runDir()])
    const code = await Promise.race([second.exited, sleep(150_000).then(() => "timeout" as const)])
    expect(code, second.output()).toBe(0)
    expect(second.output()).toMatch(/resuming from version [2-4]/)

    const metrics = await Effect.runPromise(readJsonl(join(runDir(), "metrics.jsonl"), VersionMetrics))
    expect(metrics.map((m) => m.version)).toEqual([1, 2, 3, 4])
    const summary = JSON.parse(readFileSync(join(runDir(), "summary.json"), "utf8"))
    expect(summary).toMatchObject({ versions: 4, harness_errors: 0 })
    expect(existsSync(join(runDir(), "report.md"))).toBe(true)
    expect(existsSync(join(runDir(), "checkpoints", "v000004", "model.safetensors"))).toBe(true)
  }, 320_000)
})
