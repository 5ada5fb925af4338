/**
 * The base checkpoint every mode starts from. In order:
 *   --model DIR           a model directory (config.json, tokenizer.json, model.safetensors, ...)
 *   --model fresh         a tiny freshly initialised policy (rewards are then ~always 0: every group
 *                         has zero reward variance and updates are skipped — throughput only)
 *   examples/H/base/      the harness's shipped base policy, when it exists
 *   otherwise             a quick SFT base built once with `reins sft` on the harness's own demos
 *                         and cached under the OS temp folder (same demos + steps → same model)
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"

/** A folder holding the harnesses and the benches: the repository (or its copy on a GPU machine). */
const isRepoRoot = (dir: string) => existsSync(path.join(dir, "examples")) && existsSync(path.join(dir, "bench", "syncVsAsync"))

/**
 * The repository root: the nearest folder above this module that is one, else above the working
 * folder. From the sources that is two levels up; from the GPU pack's bundle (bench/gpu/pack/, or
 * wherever a test put it) the bundle's own place says nothing, hence the search.
 */
const findRepoRoot = (): string => {
  for (const start of [fileURLToPath(new URL(".", import.meta.url)), process.cwd()]) {
    for (let dir = path.resolve(start); ; dir = path.dirname(dir)) {
      if (isRepoRoot(dir)) return dir
      if (path.dirname(dir) === dir) break
    }
  }
  throw new Error(`sync-vs-async: no repository found above ${fileURLToPath(new URL(".", import.meta.url))} or ${process.cwd()} (a folder with examples/ and bench/syncVsAsync/): run it from the repository`)
}

export const repoRoot = findRepoRoot()

export interface BaseModel {
  readonly dir: string
  /** How it was obtained, for the report. */
  readonly source: string
  /** A fresh policy still has to be written (by the caller, which has the policy package's Effect runtime). */
  readonly fresh: boolean
}

const isModelDir = (dir: string) => existsSync(path.join(dir, "config.json")) && existsSync(path.join(dir, "tokenizer.json"))

/** SFT settings of the quick base: the `reins sft` defaults, cut short. */
const QUICK_SFT = { demos: 1000, steps: 150 } as const

export const resolveBase = (harness: string, model: string | undefined, log: (line: string) => void): BaseModel => {
  if (model === "fresh") {
    const dir = path.join(os.tmpdir(), "reins-bench-cache", "fresh-policy")
    return { dir, source: "fresh: a tiny freshly initialised policy (no base checkpoint)", fresh: true }
  }
  if (model !== undefined) {
    const dir = path.resolve(model)
    if (!isModelDir(dir)) throw new Error(`--model ${model}: not a model directory (no config.json / tokenizer.json in ${dir})`)
    return { dir, source: `--model ${dir}`, fresh: false }
  }
  const shipped = path.join(repoRoot, "examples", harness, "base")
  if (isModelDir(shipped)) return { dir: shipped, source: `examples/${harness}/base`, fresh: false }
  const cache = path.join(os.tmpdir(), "reins-bench-cache", `${harness}-sft-${QUICK_SFT.demos}x${QUICK_SFT.steps}`)
  const source = `quick SFT base (examples/${harness}/demos.mjs --n ${QUICK_SFT.demos}, reins sft --steps ${QUICK_SFT.steps}; cached in ${cache}) — examples/${harness}/base does not exist`
  if (isModelDir(cache)) return { dir: cache, source, fresh: false }
  log(`no examples/${harness}/base: building a quick SFT base once into ${cache} (about a minute)`)
  const work = `${cache}.work-${process.pid}`
  rmSync(work, { recursive: true, force: true })
  mkdirSync(work, { recursive: true })
  try {
    const demos = path.join(work, "demos.jsonl")
    execFileSync(process.execPath, [path.join(repoRoot, "examples", harness, "demos.mjs"), "--n", String(QUICK_SFT.demos), "--seed", "1", "--out", demos], { stdio: ["ignore", "ignore", "inherit"] })
    const out = path.join(work, "model")
    execFileSync(process.execPath, [path.join(repoRoot, "packages", "reins", "bin", "reins.js"), "sft", "--demos", demos, "--out", out, "--steps", String(QUICK_SFT.steps)], { stdio: ["ignore", "ignore", "inherit"] })
    rmSync(cache, { recursive: true, force: true })
    renameSync(out, cache)
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
  return { dir: cache, source, fresh: false }
}
