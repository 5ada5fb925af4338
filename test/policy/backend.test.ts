/**
 * Backend selection in real processes (tfjs backends are per process): the default here is wasm
 * (no tfjs-node, no GPU; Mesa's lavapipe, a Vulkan driver on the CPU, is never picked by
 * default), `REINS_BACKEND` overrides it, and a backend asked for by name that cannot start fails
 * in one line naming what is missing: tfjs-node not installed, the `webgpu` package not installed
 * (hidden by a resolve hook), no Vulkan loader, a Vulkan loader that loads no device (a file that
 * is no library through LD_LIBRARY_PATH, or a driver manifest that does not exist: Dawn itself
 * then finds no adapter). And the engine runs inside a worker thread, where the Trainer keeps the
 * device.
 */
import { describe, expect, it } from "@effect/vitest"
import { Worker as ReinsWorker } from "@reins/runtime"
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"
import { afterAll } from "vitest"

const dir = mkdtempSync(path.join(os.tmpdir(), "reins-backend-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const probe = (values: ReadonlyArray<string>, env: Record<string, string> = {}, imports: ReadonlyArray<string> = []) => {
  const child = spawnSync(
    process.execPath,
    ["--import", "tsx", ...imports.flatMap((i) => ["--import", fileURLToPath(new URL(i, import.meta.url))]), fileURLToPath(new URL("./fixtures/backend-probe.ts", import.meta.url)), ...values],
    { env: { ...process.env, ...env }, encoding: "utf8", timeout: 60_000 }
  )
  expect(child.status, child.stderr).toBe(0)
  return JSON.parse(child.stdout.trim().split("\n").pop()!) as Array<{ env: string; backend?: string; error?: string; tag?: string }>
}

const VULKAN = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64"].some((d) => existsSync(path.join(d, "libvulkan.so.1")))
const LAVAPIPE = VULKAN && existsSync("/usr/share/vulkan/icd.d") && readdirSync("/usr/share/vulkan/icd.d").some((f) => f.startsWith("lvp_icd"))

describe("backend", () => {
  it("REINS_BACKEND overrides the default (wasm here); unknown names and backends that cannot start fail in one line naming what is missing", () => {
    const results = probe(["gpu", "tensorflow", "cpu", "auto"])
    expect(results).toEqual([
      { env: "gpu", error: "REINS_BACKEND=gpu: expected one of tensorflow, webgpu, wasm, cpu (or auto)", tag: "BackendError" },
      {
        env: "tensorflow",
        error: "backend tensorflow was requested but cannot start: neither @tensorflow/tfjs-node-gpu nor @tensorflow/tfjs-node is installed (npm install @tensorflow/tfjs-node-gpu on a machine with CUDA)",
        tag: "BackendError"
      },
      { env: "cpu", backend: "cpu" },
      { env: "auto", backend: "cpu" } // the first choice stays: tfjs backends are per process
    ])
    expect(probe(["auto"])).toEqual([{ env: "auto", backend: "wasm" }])
  })

  it.skipIf(VULKAN)("webgpu: no Vulkan loader says so", () => {
    expect(probe(["webgpu"])).toEqual([{
      env: "webgpu",
      error: "backend webgpu was requested but cannot start: no Vulkan loader (libvulkan.so.1) on this machine: install the GPU's Vulkan driver (e.g. libvulkan1 and the vendor's ICD)",
      tag: "BackendError"
    }])
  })

  it("webgpu: a Vulkan loader with no device, or no webgpu package, each say so; none falls back", () => {
    // no device: a loader that is no library (no Vulkan here), or the loader told to load a driver that does not exist
    const fake = mkdtempSync(path.join(dir, "vulkan-"))
    writeFileSync(path.join(fake, "libvulkan.so.1"), "not a shared library")
    const noDevice: Record<string, string> = VULKAN ? { VK_DRIVER_FILES: path.join(fake, "missing_icd.json") } : { LD_LIBRARY_PATH: fake }
    expect(probe(["webgpu", "wasm"], noDevice)).toEqual([
      {
        env: "webgpu",
        error: "backend webgpu was requested but cannot start: Dawn found no WebGPU adapter: no Vulkan 1.1 device (is the GPU's Vulkan driver installed? vulkaninfo lists the devices)",
        tag: "BackendError"
      },
      { env: "wasm", backend: "wasm" }
    ])
    expect(probe(["webgpu"], { HIDE_PACKAGES: "webgpu", ...noDevice }, ["./fixtures/hide-packages.mjs"])).toEqual([{
      env: "webgpu",
      error: "backend webgpu was requested but cannot start: the package webgpu is not installed (npm install webgpu)",
      tag: "BackendError"
    }])
  })

  // Mesa's lavapipe (.ci/run installs it): Vulkan on the CPU, which runs the WebGPU tests here
  it.runIf(LAVAPIPE)("auto never picks a CPU's Vulkan driver (no GPU there, and slower than wasm); asked for by name, webgpu runs on it", () => {
    expect(probe(["auto"])).toEqual([{ env: "auto", backend: "wasm" }])
    expect(probe(["webgpu"])).toEqual([{ env: "webgpu", backend: "webgpu" }])
  })

  it("the engine runs in a worker thread", async () => {
    const worker = new Worker(ReinsWorker.bootstrapPath, { workerData: { entry: new URL("./fixtures/engine-worker.ts", import.meta.url).href } })
    try {
      const message = await new Promise<{ backend: string; outputIds: Array<number>; finishReason: string }>((resolve, reject) => {
        worker.once("message", resolve)
        worker.once("error", reject)
        worker.once("exit", (code) => reject(new Error(`worker exited with ${code}`)))
      })
      expect(message.backend).toBe("wasm")
      expect(message.outputIds).toHaveLength(5)
      expect(message.finishReason).toBe("length")
    } finally {
      await worker.terminate()
    }
  })
})
