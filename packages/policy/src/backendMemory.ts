/**
 * How much memory the running backend has, so micro-batches and KV caches are sized from it
 * rather than from wasm's limits:
 *
 *   wasm        wasm32's 4 GiB heap
 *   cpu         half of this machine's memory (tensors are JavaScript arrays)
 *   tensorflow  on a GPU: the card's memory, from `nvidia-smi`; on libtensorflow's CPU build:
 *               half of this machine's memory
 *   webgpu      the card's memory from `nvidia-smi` where there is one (WebGPU itself does not
 *               say); else 8 GiB is assumed, and the log says so. No tensor may exceed the
 *               adapter's storage-buffer binding limit.
 *
 * `REINS_DEVICE_MEMORY_MB` overrides the figure for any backend (wasm: at most 4096).
 * The KV caches of the CPU's decode path live in its own wasm memory on the host: their default
 * is the most that memory can hold, or a quarter of this machine's memory if less. The GPU's
 * decode path (WebGPU) keeps them on the device: a quarter of its memory by default.
 */
import * as tf from "@tensorflow/tfjs"
import { execFileSync } from "node:child_process"
import * as os from "node:os"
import { BackendError, type BackendName, tensorflowOnGpu } from "./backend.js"
import { KERNEL_MAX_BYTES } from "./model/attentionKernel.js"
import type { ModelConfig } from "./model/config.js"
import { fitMicroBatchTokens, type MicroBatchFit, type TrainingShape, WASM_HEAP_BYTES } from "./model/memory.js"

const MIB = 1024 * 1024

/** What a GPU is assumed to hold when nothing says (the log names `REINS_DEVICE_MEMORY_MB`). */
export const ASSUMED_GPU_BYTES = 8 * 1024 * MIB

/** Micro-batch tokens past which CPU backends train no faster (on wasm: within 5% from 1k to 4k, slower beyond; `npm run bench -- micro-batch`). */
export const CPU_SPEED_TOKENS = 4096

export interface BackendMemory {
  readonly bytes: number
  /** Where `bytes` came from, for the log. */
  readonly source: string
  /** No single tensor may be larger (WebGPU's storage-buffer binding limit). */
  readonly maxTensorBytes?: number
  /** Larger micro-batches are no faster on this backend. */
  readonly speedTokens?: number
}

/** A positive number of MiB from the environment, or undefined; a bad value is a `BackendError` naming the variable. */
export const mebibytesFromEnv = (name: string, env: NodeJS.ProcessEnv, max?: number): number | undefined => {
  const raw = env[name]
  if (raw === undefined || raw.trim() === "") return undefined
  const mb = Number(raw)
  if (!(Number.isFinite(mb) && mb > 0)) throw new BackendError({ message: `${name}=${raw}: expected a positive number of MiB` })
  if (max !== undefined && mb > max) throw new BackendError({ message: `${name}=${raw}: at most ${max} MiB here` })
  return Math.floor(mb * MIB)
}

/**
 * The memory of the GPU this process uses, in bytes, from `nvidia-smi` (the first GPU that
 * `CUDA_VISIBLE_DEVICES` lets it see); undefined without one.
 */
export const nvidiaGpuBytes = (env: NodeJS.ProcessEnv = process.env): number | undefined => {
  let out: string
  try {
    out = execFileSync("nvidia-smi", ["--query-gpu=index,memory.total", "--format=csv,noheader,nounits"], {
      encoding: "utf8",
      timeout: 10_000,
      stdio: ["ignore", "pipe", "ignore"],
      env
    })
  } catch {
    return undefined
  }
  const gpus = new Map<string, number>()
  for (const line of out.split("\n")) {
    const [index, mib] = line.split(",").map((s) => s.trim())
    if (index !== undefined && index !== "" && Number(mib) > 0) gpus.set(index, Number(mib))
  }
  const visible = (env["CUDA_VISIBLE_DEVICES"] ?? "").split(",").map((s) => s.trim()).filter(Boolean)
  const mib = visible.length > 0 ? gpus.get(visible[0]!) : gpus.values().next().value
  return mib === undefined ? undefined : mib * MIB
}

/** WebGPU's limit on one storage buffer binding (one tensor), read from tfjs's device. */
const webgpuMaxTensorBytes = (): number | undefined => {
  const device = (tf.backend() as unknown as { device?: { limits?: { maxStorageBufferBindingSize?: number } } }).device
  return device?.limits?.maxStorageBufferBindingSize
}

const halfOfHost = (): BackendMemory => ({ bytes: Math.floor(os.totalmem() / 2), source: "half of this machine's memory", speedTokens: CPU_SPEED_TOKENS })

/** The memory of `backend` (the one running: WebGPU's limit is read from it). Throws `BackendError` on a bad override. */
export const backendMemory = (backend: BackendName, env: NodeJS.ProcessEnv = process.env): BackendMemory => {
  const override = mebibytesFromEnv("REINS_DEVICE_MEMORY_MB", env, backend === "wasm" ? WASM_HEAP_BYTES / MIB : undefined)
  const measured = ((): BackendMemory => {
    switch (backend) {
      case "wasm":
        return { bytes: WASM_HEAP_BYTES, source: "the wasm32 heap", speedTokens: CPU_SPEED_TOKENS }
      case "cpu":
        return halfOfHost()
      case "tensorflow": {
        if (!tensorflowOnGpu()) return halfOfHost()
        const gpu = nvidiaGpuBytes(env)
        return gpu !== undefined ? { bytes: gpu, source: "nvidia-smi" } : { bytes: ASSUMED_GPU_BYTES, source: "assumed (nvidia-smi did not answer; set REINS_DEVICE_MEMORY_MB)" }
      }
      case "webgpu": {
        const gpu = nvidiaGpuBytes(env)
        const maxTensorBytes = webgpuMaxTensorBytes()
        const limit = maxTensorBytes !== undefined ? { maxTensorBytes } : {}
        return gpu !== undefined
          ? { bytes: gpu, source: "nvidia-smi", ...limit }
          : { bytes: ASSUMED_GPU_BYTES, source: "assumed (WebGPU does not report memory; set REINS_DEVICE_MEMORY_MB)", ...limit }
      }
    }
  })()
  return override === undefined ? measured : { ...measured, bytes: override, source: "REINS_DEVICE_MEMORY_MB" }
}

/**
 * Bytes for the KV caches. The CPU's decode path keeps them in its kernels' wasm memory:
 * `REINS_KV_CACHE_MB` (at most what that memory can address), else that most, or a quarter of
 * this machine's memory where that is less. The GPU's (`device`: the backend's memory) keeps them
 * on the device: `REINS_KV_CACHE_MB`, else a quarter of the device's memory.
 */
export const kvCacheBytes = (env: NodeJS.ProcessEnv = process.env, device?: BackendMemory): number =>
  device !== undefined
    ? mebibytesFromEnv("REINS_KV_CACHE_MB", env) ?? Math.floor(device.bytes / 4)
    : mebibytesFromEnv("REINS_KV_CACHE_MB", env, KERNEL_MAX_BYTES / MIB) ?? Math.min(KERNEL_MAX_BYTES, Math.floor(os.totalmem() / 4))

/** Training micro-batches for `config` on a backend with `memory`, rows of `seqLen`. */
export const microBatchFit = (
  config: ModelConfig,
  memory: BackendMemory,
  options: TrainingShape
): MicroBatchFit =>
  fitMicroBatchTokens(config, { memoryBytes: memory.bytes, maxTensorBytes: memory.maxTensorBytes, speedTokens: memory.speedTokens, ...options })
