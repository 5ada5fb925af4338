/**
 * The GPU check's own logic, end to end on this machine's wasm backend (no GPU here): the pack
 * is made (esbuild bundles, the wasm binaries, Dawn and the SQLite addon compressed; this
 * machine's node stands in for the packed one) inside a copy of the repository's workload files,
 * run.sh unpacks them and runs the bundled check with a tiny model, wasm under test against cpu
 * as the reference, and the results are written: correctness within its tolerances, the matmul
 * and bandwidth bounds measured, every speed row a rate over its bound. Asking run.sh for its
 * default backend, webgpu, fails in one line naming what is missing. `run.sh headline` runs
 * sync-vs-async from the same pack, every schedule with real harness processes. And
 * a run like one on WebGPU in Node, which cannot read tensors synchronously (cpu with every
 * synchronous read made to throw): every part goes through, the engine on the reference device
 * decoder (tfjs ops, one asynchronous read per step, as WebGPU's decoder reads), generating what
 * wasm's generates.
 */
import { spawnSync } from "node:child_process"
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../..", import.meta.url))
const dir = mkdtempSync(path.join(os.tmpdir(), "reins-gpu-check-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const sizeOf = (p: string): number => (statSync(p).isDirectory() ? readdirSync(p).reduce((n, f) => n + sizeOf(path.join(p, f)), 0) : statSync(p).size)

interface Row { label: string; measured: number | null; bound: number; fraction: number | null; goal: number | null }

describe("the GPU check", () => {
  it("packs small, and its run.sh runs the check on wasm against cpu, writing every figure", () => {
    // As on the GPU machine: the pack inside a copy of the repository (here only what the
    // headline reads: the calc harness and its base, the bench's verifier and tail scripts), with
    // no node_modules anywhere above it.
    const repo = path.join(dir, "repo")
    for (const part of ["examples/calc", "bench/syncVsAsync"]) cpSync(path.join(root, part), path.join(repo, part), { recursive: true })
    mkdirSync(path.join(repo, "bench/gpu"), { recursive: true })
    const pack = path.join(repo, "bench/gpu/pack")
    const packed = spawnSync(process.execPath, [path.join(root, "bench/gpu/pack.mjs"), "--no-node", "--out", pack], { encoding: "utf8", timeout: 120_000 })
    expect(packed.status, packed.stderr).toBe(0)
    for (
      const f of [
        "app/dist/check.mjs",
        "app/dist/headline.mjs",
        "app/dist/rollback.mjs",
        "app/dist/worker.js",
        "app/dist/chat_template.jinja",
        "ui/app.js",
        "run.sh",
        "node_modules/webgpu/dist/linux-x64/dawn.node.xz",
        "node_modules/@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm",
        "node_modules/better-sqlite3/build/Release/better_sqlite3.node.xz",
        "node_modules/openai/index.mjs"
      ]
    ) {
      expect(existsSync(path.join(pack, f)), f).toBe(true)
    }
    // this machine's Vulkan loader, for a GPU machine without one (.ci/run installs it)
    if (existsSync("/usr/lib/x86_64-linux-gnu/libvulkan.so.1")) expect(existsSync(path.join(pack, "lib/libvulkan.so.1.xz"))).toBe(true)
    // Without node: room for this machine's node compressed (~27 MiB) and the repository's tracked
    // files (~15 MiB) under the 64 MiB a copy allows (pack.mjs checks the sum itself).
    expect(sizeOf(pack) / 2 ** 20).toBeLessThan(20)
    symlinkSync(process.execPath, path.join(pack, "node"))

    const out = path.join(dir, "results")
    const run = spawnSync("bash", [path.join(pack, "run.sh"), "--reference", "cpu", "--arch", "tiny", "--quick"], {
      env: { ...process.env, NODE_OPTIONS: "", OUT: out, REINS_BACKEND: "wasm" },
      encoding: "utf8",
      timeout: 240_000
    })
    expect(run.status, run.stderr).toBe(0)
    expect(existsSync(path.join(pack, "node_modules/webgpu/dist/linux-x64/dawn.node"))).toBe(true) // unpacked
    expect(readFileSync(path.join(out, "gpu-nvidia-smi.txt"), "utf8")).toMatch(/\S/)
    const result = JSON.parse(readFileSync(path.join(out, "gpu-quick.json"), "utf8"))
    expect(result).toMatchObject({ backend: "wasm", reference: "cpu", adapter: null, quick: true })
    const c = result.correctness
    expect(c.error).toBeUndefined()
    expect(c.logprobMaxAbsDiff).toBeLessThanOrEqual(result.tolerance.logprob)
    expect(c.nextMaxAbsDiff).toBeLessThanOrEqual(result.tolerance.logprob)
    expect(c.lossDiff).toBeLessThanOrEqual(result.tolerance.loss)
    expect(c.updateRelDiff).toBeLessThanOrEqual(result.tolerance.update)
    expect(c.met).toBe(true)
    expect(c.loss).toBeGreaterThan(0)
    expect(result.bounds.matmul.gflops).toBeGreaterThan(0.1)
    expect(result.bounds.matmul.sizes).toHaveLength(3)
    expect(result.bounds.bandwidth.gbps).toBeGreaterThan(0.1)
    const rows = result.speed.rows as Array<Row>
    expect(rows.map((r) => r.label)).toEqual(["prefill", "decode ×1", "decode ×16", "decode ×64", "full train", "LoRA train"])
    for (const r of rows) {
      expect(r.measured, r.label).toBeGreaterThan(0)
      expect(r.fraction, r.label).toBeCloseTo(r.measured! / r.bound, 6)
    }
    // errors WebGPU reports without throwing, per part (none on wasm; device-every-backend.test.ts injects one on WebGPU)
    expect(result.gpu_errors).toEqual({ correctness: null, bounds: null, speed: null })
    expect(readFileSync(path.join(out, "gpu-quick.md"), "utf8")).toContain("| GPU errors reported without throwing, speed | none |")
    expect(readFileSync(path.join(out, "gpu-quick.md"), "utf8")).toContain("| decode ×64 |")
    expect(readFileSync(path.join(out, "gpu-quick.svg"), "utf8")).toContain("<svg")

    // The default backend is webgpu: no Vulkan device here, and it says so instead of falling back.
    const webgpu = spawnSync("bash", [path.join(pack, "run.sh"), "--arch", "tiny", "--quick"], {
      // no Vulkan device even where a loader and Mesa's CPU driver are installed (CI)
      env: { ...process.env, NODE_OPTIONS: "", OUT: out, REINS_BACKEND: "", VK_DRIVER_FILES: path.join(out, "no_icd.json") },
      encoding: "utf8",
      timeout: 60_000
    })
    expect(webgpu.status).toBe(1)
    expect(webgpu.stderr).toMatch(/gpu check: backend webgpu was requested but cannot start: (no Vulkan loader|Dawn found no WebGPU adapter)/)

    // The headline from the same pack: every schedule with real harness processes, which import
    // `openai` from the pack (run.sh links its node_modules into the repository).
    const headline = spawnSync("bash", [path.join(pack, "run.sh"), "headline", "--updates", "1", "--groups", "1", "--n", "2", "--eval-tasks", "1", "--eval-samples", "1", "--repeats", "1"], {
      cwd: dir,
      env: { ...process.env, NODE_OPTIONS: "", OUT: out, REINS_BACKEND: "wasm" },
      encoding: "utf8",
      timeout: 180_000
    })
    expect(headline.status, headline.stderr).toBe(0)
    expect(lstatSync(path.join(repo, "node_modules")).isSymbolicLink()).toBe(true)
    const h = JSON.parse(readFileSync(path.join(out, "sync-vs-async.json"), "utf8"))
    expect(h.device_backend).toBe("wasm")
    expect(Object.keys(h.modes)).toEqual(["sync", "collocated-drain", "collocated-interrupt", "split"])
    for (const [mode, m] of Object.entries<{ harness_errors: number; timed_out: boolean; rollouts_per_s: number; final_pass_at_1: number | null }>(h.modes)) {
      expect(m.harness_errors, mode).toBe(0)
      expect(m.timed_out, mode).toBe(false)
      expect(m.rollouts_per_s, mode).toBeGreaterThan(0)
      expect(m.final_pass_at_1, mode).not.toBeNull()
    }
    expect(h.collocated_vs_sync).toBeGreaterThan(0)
    expect(h.collocated_vs_split_per_device).toBeGreaterThan(0)
    for (const f of ["sync-vs-async.md", "sync-vs-async.svg", "sync-vs-async-timeline-split.svg", "sync-vs-async-reward.svg"]) expect(existsSync(path.join(out, f)), f).toBe(true)
    // Its default backend is webgpu too: without a Vulkan device, one line naming what is missing.
    const noGpu = spawnSync("bash", [path.join(pack, "run.sh"), "headline", "--quick"], {
      env: { ...process.env, NODE_OPTIONS: "", OUT: out, REINS_BACKEND: "", VK_DRIVER_FILES: path.join(out, "no_icd.json") },
      encoding: "utf8",
      timeout: 60_000
    })
    expect(noGpu.status).toBe(1)
    expect(noGpu.stderr).toMatch(/^sync-vs-async: .*backend webgpu was requested but cannot start: (no Vulkan loader|Dawn found no WebGPU adapter).*$/m)

    // The rollback bench from the same pack: both kinds of point, timed, with the step beside them.
    const rollback = spawnSync("bash", [path.join(pack, "run.sh"), "rollback", "--quick"], {
      env: { ...process.env, NODE_OPTIONS: "", OUT: out, REINS_BACKEND: "wasm" },
      encoding: "utf8",
      timeout: 60_000
    })
    expect(rollback.status, rollback.stderr).toBe(0)
    const r = JSON.parse(readFileSync(path.join(out, "rollback-wasm-quick.json"), "utf8"))
    expect(r.backend).toBe("wasm")
    for (const kept of [r.host, r.device]) expect(kept.take_ms).toBeGreaterThan(0)
    expect(r.step_ms).toBeGreaterThan(0)
    for (const f of ["rollback-wasm-quick.md", "rollback-wasm-quick.svg"]) expect(existsSync(path.join(out, f)), f).toBe(true)
  }, 420_000)

  it("on a backend that cannot read synchronously, as WebGPU in Node: every part runs, the engine on the reference device decoder", () => {
    const out = path.join(dir, "no-sync")
    const run = spawnSync(process.execPath, [path.join(root, "node_modules/tsx/dist/cli.mjs"), path.join(root, "bench/run.ts"), "gpu", "--backend", "cpu", "--reference", "wasm", "--arch", "tiny", "--quick", "--out", out], {
      env: { ...process.env, NODE_OPTIONS: `--conditions=reins-source --import ${path.join(root, "test/policy/fixtures/forbid-sync-reads.mjs")}` },
      encoding: "utf8",
      timeout: 240_000
    })
    expect(run.status, run.stderr).toBe(0)
    const result = JSON.parse(readFileSync(path.join(out, "gpu-quick.json"), "utf8"))
    expect(result).toMatchObject({ backend: "cpu", reference: "wasm", correctness: { met: true } })
    // the engine ran on the reference device decoder (tfjs ops, read asynchronously), wasm's on its own, and generated what wasm's did
    expect(result.correctness.decoders).toEqual({ test: "reference (tfjs ops)", reference: "fast" })
    expect(result.correctness.generation).toMatchObject({ sameTokens: true })
    expect(result.correctness.generation.logprobMaxAbsDiff).toBeLessThanOrEqual(result.tolerance.logprob)
    for (const r of result.speed.rows as Array<Row & { error?: string }>) {
      expect(r.error, r.label).toBeUndefined()
      expect(r.measured, r.label).toBeGreaterThan(0)
    }
  }, 300_000)
})
