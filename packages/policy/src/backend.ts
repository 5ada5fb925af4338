/**
 * Picks the TensorFlow.js backend the policy runs on, once per process (tfjs backends are global).
 * By default the fastest one that initialises, in this order:
 *
 *   tensorflow  `@tensorflow/tfjs-node-gpu` (CUDA): install it on a machine with an NVIDIA GPU
 *   webgpu      `@tensorflow/tfjs-backend-webgpu` on Dawn (the `webgpu` package, whose Linux x64
 *               build ships inside it): any GPU with a Vulkan 1.1 driver, no CUDA toolkit (a
 *               software adapter such as Mesa's lavapipe only when asked for by name)
 *   tensorflow  `@tensorflow/tfjs-node` (libtensorflow on the CPU)
 *   wasm        XNNPACK with SIMD, single-threaded. Its .wasm files are loaded from
 *               node_modules/@tensorflow/tfjs-backend-wasm/dist, so nothing is ever downloaded.
 *   cpu         the pure-JS fallback (~10x slower than wasm here).
 *
 * The GPU packages are optional: a missing one only removes its backend from the default choice.
 * `REINS_BACKEND=tensorflow|webgpu|wasm|cpu` picks one by name; one that cannot start is a
 * one-line error naming what is missing, never a silent fall-back.
 */
import * as tf from "@tensorflow/tfjs"
import { Data } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { watchGpuErrors } from "./gpuErrors.js"

export type BackendName = "tensorflow" | "webgpu" | "wasm" | "cpu"
export const BACKENDS: ReadonlyArray<BackendName> = ["tensorflow", "webgpu", "wasm", "cpu"]

export class BackendError extends Data.TaggedError("BackendError")<{ readonly message: string; readonly cause?: unknown }> {}

const require = createRequire(import.meta.url)

/** Why a backend could not start: what is missing, in one line. */
class Missing extends Error {}

/** A package TypeScript and bundlers do not try to resolve (one that may not be installed). */
const byName = (name: string): Promise<any> => import(name)

/**
 * Imports a package that may be missing; `Missing` if it is. `load` imports it by a literal name
 * where it can be (so a bundle includes it), else by `name`.
 */
const importOptional = async (name: string, install: string, load: () => Promise<any> = () => byName(name)): Promise<any> => {
  try {
    return await load()
  } catch (e) {
    const error = e as { code?: string; message?: string }
    if (error.code === "ERR_MODULE_NOT_FOUND" && String(error.message).includes(`'${name}'`)) {
      throw new Missing(`the package ${name} is not installed (${install})`)
    }
    throw new Missing(`${name} could not be loaded: ${firstLine(error.message)}`)
  }
}

const firstLine = (message: unknown) => String(message ?? "").split("\n")[0]!.trim()

/** Which TensorFlow build the tensorflow backend runs on, once it loaded. */
let tensorflowBuild: "gpu" | "cpu" | undefined

/** The tensorflow backend runs on a GPU (`@tensorflow/tfjs-node-gpu`), not on libtensorflow's CPU build. */
export const tensorflowOnGpu = (): boolean => tensorflowBuild === "gpu"

const loadTensorflow = async (which: "gpu" | "cpu" | "any"): Promise<void> => {
  if (which !== "cpu") {
    try {
      await importOptional("@tensorflow/tfjs-node-gpu", "npm install @tensorflow/tfjs-node-gpu")
      return void (tensorflowBuild = "gpu")
    } catch (e) {
      if (which === "gpu") throw e
    }
  }
  try {
    await importOptional("@tensorflow/tfjs-node", "npm install @tensorflow/tfjs-node")
    tensorflowBuild = "cpu"
  } catch (e) {
    throw which === "any"
      ? new Missing("neither @tensorflow/tfjs-node-gpu nor @tensorflow/tfjs-node is installed (npm install @tensorflow/tfjs-node-gpu on a machine with CUDA)")
      : e
  }
}

/** Where the dynamic loader looks for libvulkan.so.1 (Dawn's Vulkan backend needs it). */
const VULKAN_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64"]
const hasVulkanLoader = () =>
  process.platform !== "linux" ||
  [...(process.env["LD_LIBRARY_PATH"] ?? "").split(":").filter(Boolean), ...VULKAN_DIRS].some((dir) => existsSync(join(dir, "libvulkan.so.1")))

/** Where the Vulkan loader looks for driver manifests when no variable names them. */
const icdDirs = () => {
  const env = process.env
  const config = (env["XDG_CONFIG_DIRS"] ?? "/etc/xdg").split(":")
  const data = (env["XDG_DATA_DIRS"] ?? "/usr/local/share:/usr/share").split(":")
  const home = env["HOME"] === undefined ? [] : [join(env["HOME"], ".local/share")]
  return [...config, "/etc", ...data, "/usr/local/share", "/usr/share", ...home].map((d) => join(d, "vulkan/icd.d"))
}

/**
 * Why no Vulkan driver here can reach a GPU, read without loading Dawn (whose adapter probe on
 * Mesa's CPU driver, lavapipe, prints warnings in every process): no variable names a driver,
 * every driver manifest is Mesa's (`libvulkan_*.so`), and no device node exists that Mesa's GPU
 * drivers open (/dev/dri/renderD*). Undefined when a GPU may be there (an NVIDIA driver, say).
 */
const noGpuDriver = (): string | undefined => {
  if (["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"].some((v) => (process.env[v] ?? "") !== "")) return undefined
  const entries = (dir: string) => {
    try {
      return readdirSync(dir).map((f) => join(dir, f))
    } catch {
      return []
    }
  }
  if (entries("/dev/dri").some((f) => f.includes("renderD"))) return undefined
  const libraries = [...new Set(icdDirs())].flatMap(entries).filter((f) => f.endsWith(".json")).map((file) => {
    try {
      return String(JSON.parse(readFileSync(file, "utf8"))?.ICD?.library_path ?? file)
    } catch {
      return file
    }
  })
  if (libraries.length === 0 || !libraries.every((lib) => /libvulkan_\w+\.so/.test(lib))) return undefined
  return `only Mesa's drivers (${libraries.map((l) => l.split("/").pop()).join(", ")}) and no /dev/dri render node: lavapipe, on the CPU, is all they can run`
}

/**
 * WebGPU on Dawn: its globals (`GPUBufferUsage`, ...) and `navigator.gpu`, which the tfjs backend
 * reads, then an adapter. No adapter means no usable GPU: the error says which piece is missing.
 */
const loadWebgpu = async (software: "refuse" | "accept"): Promise<void> => {
  // First what costs nothing to check, so a machine without Vulkan never loads Dawn (21 MB).
  if (!hasVulkanLoader()) {
    throw new Missing("no Vulkan loader (libvulkan.so.1) on this machine: install the GPU's Vulkan driver (e.g. libvulkan1 and the vendor's ICD)")
  }
  const noGpu = software === "refuse" ? noGpuDriver() : undefined
  if (noGpu !== undefined) throw new Missing(`no GPU for Vulkan: ${noGpu} (REINS_BACKEND=webgpu uses it anyway)`)
  const dawn = await importOptional("webgpu", "npm install webgpu")
  const gpu = dawn.create([])
  Object.assign(globalThis, dawn.globals)
  if ((globalThis as { navigator?: unknown }).navigator === undefined) {
    Object.defineProperty(globalThis, "navigator", { value: { gpu }, configurable: true, writable: true })
  } else if (!("gpu" in (globalThis as any).navigator)) {
    Object.defineProperty((globalThis as any).navigator, "gpu", { value: gpu, configurable: true })
  }
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" })
  if (adapter === null || adapter === undefined) {
    throw new Missing("Dawn found no WebGPU adapter: no Vulkan 1.1 device (is the GPU's Vulkan driver installed? vulkaninfo lists the devices)")
  }
  // A CPU's Vulkan (Mesa's lavapipe) is no GPU, and slower than wasm: used only when asked for by name.
  if (adapter.info?.isFallbackAdapter === true && software === "refuse") {
    throw new Missing(`Dawn's only adapter runs on the CPU (${adapter.info.description || adapter.info.device}), not a GPU: REINS_BACKEND=webgpu uses it anyway`)
  }
  await importOptional("@tensorflow/tfjs-backend-webgpu", "npm install @tensorflow/tfjs-backend-webgpu@4.22.0", () => import("@tensorflow/tfjs-backend-webgpu"))
}

const loadWasm = async (): Promise<void> => {
  const imported = await importOptional("@tensorflow/tfjs-backend-wasm", "npm install @tensorflow/tfjs-backend-wasm@4.22.0", () => import("@tensorflow/tfjs-backend-wasm"))
  // A bundle that splits this CommonJS package into a chunk of its own (the GPU pack) gives its exports as `default`.
  const wasm = typeof imported.setWasmPaths === "function" ? imported : imported.default
  // A prefix: each of its .wasm files (plain, SIMD, threaded SIMD) is loaded from there.
  wasm.setWasmPaths(join(dirname(require.resolve("@tensorflow/tfjs-backend-wasm/package.json")), "dist") + "/")
}

/**
 * The wasm backend's Identity kernel copies its input, and tfjs clones (Identity) every tensor it
 * saves for a gradient, so training copied every saved activation (~0.3 s per 32×128 step of the
 * bench model). Tensors are immutable, so a clone may share the buffer by reference count —
 * exactly what that backend's own Reshape kernel does, and what the cpu backend's Identity does.
 */
const shareIdentityBuffers = (): void => {
  tf.unregisterKernel("Identity", "wasm")
  tf.registerKernel({
    kernelName: "Identity",
    backendName: "wasm",
    kernelFunc: ({ inputs, backend }) => {
      const x = inputs["x"] as tf.TensorInfo
      ;(backend as unknown as { incRef(dataId: object): void }).incRef(x.dataId)
      return { dataId: x.dataId, shape: x.shape, dtype: x.dtype }
    }
  })
}

/** One way to start a backend: what loads it, and the tfjs backend it registers. */
interface Candidate {
  readonly name: BackendName
  readonly load: () => Promise<void>
}

const candidate = (name: BackendName, load: () => Promise<void> = async () => {}): Candidate => ({ name, load })

/** The default order: the fastest first. */
const AUTO: ReadonlyArray<Candidate> = [
  candidate("tensorflow", () => loadTensorflow("gpu")),
  candidate("webgpu", () => loadWebgpu("refuse")),
  candidate("tensorflow", () => loadTensorflow("cpu")),
  candidate("wasm", loadWasm),
  candidate("cpu")
]

const BY_NAME: Record<BackendName, Candidate> = {
  tensorflow: candidate("tensorflow", () => loadTensorflow("any")),
  webgpu: candidate("webgpu", () => loadWebgpu("accept")),
  wasm: candidate("wasm", loadWasm),
  cpu: candidate("cpu")
}

/** Starts a backend, or throws `Missing` saying why it cannot. */
const activate = async ({ load, name }: Candidate): Promise<void> => {
  await load()
  let ready: boolean
  try {
    ready = (await tf.setBackend(name)) && tf.getBackend() === name
  } catch (e) {
    throw new Missing(`tfjs could not start it: ${firstLine((e as Error).message)}`)
  }
  if (!ready) throw new Missing("tfjs could not start it")
  if (name === "wasm") shareIdentityBuffers()
  if (name === "webgpu") watchGpuErrors()
}

const parseOverride = (value: string | undefined): BackendName | undefined => {
  if (value === undefined || value === "" || value === "auto") return undefined
  if ((BACKENDS as ReadonlyArray<string>).includes(value)) return value as BackendName
  throw new BackendError({ message: `REINS_BACKEND=${value}: expected one of ${BACKENDS.join(", ")} (or auto)` })
}

let chosen: Promise<BackendName> | undefined

/**
 * Initialises the backend (idempotent: later calls return the first choice). `preferred` wins
 * over `REINS_BACKEND`, which wins over auto-detection. Rejects with `BackendError`.
 */
export const initBackend = (preferred?: BackendName): Promise<BackendName> => {
  chosen ??= (async () => {
    const wanted = preferred ?? parseOverride(process.env["REINS_BACKEND"])
    if (wanted !== undefined) {
      try {
        await activate(BY_NAME[wanted])
        return wanted
      } catch (e) {
        throw new BackendError({ message: `backend ${wanted} was requested but cannot start: ${(e as Error).message}`, cause: e })
      }
    }
    const skipped: Array<string> = []
    for (const c of AUTO) {
      try {
        await activate(c)
        return c.name
      } catch (e) {
        skipped.push(`${c.name}: ${(e as Error).message}`)
      }
    }
    throw new BackendError({ message: `no TensorFlow.js backend could start (${skipped.join("; ")})` })
  })()
  chosen.catch(() => (chosen = undefined))
  return chosen
}
