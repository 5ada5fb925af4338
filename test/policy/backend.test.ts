/**
 * Backend selection in real processes (tfjs backends are per process): the default here is wasm,
 * `REINS_BACKEND` overrides it, asking for a backend that cannot load (tfjs-node is not installed
 * here) or a bogus name fails clearly; and the engine runs inside a worker thread, where the
 * Trainer keeps the device.
 */
import { describe, expect, it } from "@effect/vitest"
import { Worker as ReinsWorker } from "@reins/runtime"
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"

describe("backend", () => {
  it("REINS_BACKEND overrides the choice; unknown or unloadable backends fail clearly (wasm is the default: every other test runs on it)", () => {
    const child = spawnSync(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./fixtures/backend-probe.ts", import.meta.url))], {
      env: { ...process.env },
      encoding: "utf8",
      timeout: 60_000
    })
    expect(child.status).toBe(0)
    expect(JSON.parse(child.stdout.trim().split("\n").pop()!)).toEqual([
      { env: "gpu", error: "REINS_BACKEND=gpu: expected one of tensorflow, wasm, cpu (or auto)", tag: "BackendError" },
      { env: "tensorflow", error: "backend tensorflow was requested but could not be loaded", tag: "BackendError" },
      { env: "cpu", backend: "cpu" }
    ])
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
