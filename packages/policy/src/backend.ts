/**
 * Picks the TensorFlow.js backend the policy runs on, once per process (tfjs backends are global):
 *
 *   tensorflow  when `@tensorflow/tfjs-node-gpu` or `@tensorflow/tfjs-node` can be imported
 *               (optional peer dependencies: install one on a machine with a GPU or for libtensorflow)
 *   wasm        otherwise: XNNPACK with SIMD, single-threaded. Its .wasm files are loaded from
 *               node_modules/@tensorflow/tfjs-backend-wasm/dist, so nothing is ever downloaded.
 *   cpu         the pure-JS fallback (~10x slower than wasm here).
 *
 * `REINS_BACKEND=tensorflow|wasm|cpu` overrides the choice; asking for a backend that cannot
 * load is an error rather than a silent fallback.
 */
import * as tf from "@tensorflow/tfjs"
import { Data } from "effect"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"

export type BackendName = "tensorflow" | "wasm" | "cpu"
export const BACKENDS: ReadonlyArray<BackendName> = ["tensorflow", "wasm", "cpu"]

export class BackendError extends Data.TaggedError("BackendError")<{ readonly message: string; readonly cause?: unknown }> {}

const require = createRequire(import.meta.url)

/** Imports a module by a name TypeScript does not try to resolve (the node bindings are optional). */
const importOptional = async (name: string): Promise<boolean> => {
  try {
    await import(name)
    return true
  } catch {
    return false
  }
}

const loadTensorflow = async (): Promise<boolean> =>
  (await importOptional("@tensorflow/tfjs-node-gpu")) || (await importOptional("@tensorflow/tfjs-node"))

const loadWasm = async (): Promise<boolean> => {
  try {
    const wasm = await import("@tensorflow/tfjs-backend-wasm")
    // A prefix: each of its .wasm files (plain, SIMD, threaded SIMD) is loaded from there.
    wasm.setWasmPaths(join(dirname(require.resolve("@tensorflow/tfjs-backend-wasm/package.json")), "dist") + "/")
    return true
  } catch {
    return false
  }
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

const activate = async (name: BackendName): Promise<boolean> => {
  const loaded = name === "tensorflow" ? await loadTensorflow() : name === "wasm" ? await loadWasm() : true
  if (!loaded) return false
  try {
    if (!((await tf.setBackend(name)) && tf.getBackend() === name)) return false
    if (name === "wasm") shareIdentityBuffers()
    return true
  } catch {
    return false
  }
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
      if (await activate(wanted)) return wanted
      throw new BackendError({ message: `backend ${wanted} was requested but could not be loaded` })
    }
    for (const name of BACKENDS) if (await activate(name)) return name
    throw new BackendError({ message: "no TensorFlow.js backend could be loaded" })
  })()
  chosen.catch(() => (chosen = undefined))
  return chosen
}
