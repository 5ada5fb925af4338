/**
 * Moving data between JavaScript and tfjs without waste. Two facts about this machine shape it:
 *
 * - On the wasm backend a tensor lives in the wasm heap, and `dataSync()` copies it into a fresh
 *   ArrayBuffer. Fresh buffers are expensive here (first-touch page faults cost ~10-40 µs per
 *   4 KiB page in this VM: an 8 MiB `dataSync` takes ~40 ms, reading a view of it ~1 ms). So on
 *   wasm we read through a *view* of the heap, and reuse our own scratch buffers.
 * - A heap view is only valid until the next tfjs allocation (the heap may grow and detach the
 *   old buffer): take it, use it, drop it.
 *
 * On the cpu backend `dataSync()` returns the backend's own array, and `tf.tensor(values)`
 * adopts `values` without copying, so there we copy on upload instead.
 */
import * as tf from "@tensorflow/tfjs"
import { WebAssembly } from "./wasmAssembly.js"

interface WasmBackendLike {
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array | Int32Array
  makeOutput(shape: Array<number>, dtype: tf.DataType): tf.TensorInfo
  readonly wasm: { readonly HEAPU8: Uint8Array; readonly HEAPF32: Float32Array; readonly asm?: { readonly memory?: object } }
  readonly dataIdMap: { get(dataId: object): { readonly memoryOffset: number } | undefined }
}

/** The most the wasm heap can grow to (emscripten's `getHeapMax`: 4 GiB less one 64 KiB page). */
const WASM_HEAP_MAX = 2 ** 32 - 2 ** 16

const wasmBackend = () => tf.backend() as unknown as WasmBackendLike

export const isWasm = (): boolean => tf.getBackend() === "wasm"

/** The values of a float32 tensor, read-only, valid until the next tfjs call that allocates. */
export const view = (t: tf.Tensor): Float32Array =>
  isWasm() ? (wasmBackend().typedArrayFromHeap(t) as Float32Array) : (t.dataSync() as Float32Array)

/**
 * A float32 tensor whose values are whatever its memory held (on wasm, allocated and not
 * written: its pages are first touched by whoever writes it); zeros elsewhere. For a caller that
 * writes every value through `view` before any use.
 */
export const uninitialized = (shape: ReadonlyArray<number>): tf.Tensor =>
  isWasm() ? tf.engine().makeTensorFromTensorInfo(wasmBackend().makeOutput([...shape], "float32")) : tf.zeros([...shape])

/**
 * Makes room for `bytes` more in the wasm heap in one step, before they are allocated piece by
 * piece. The heap otherwise grows by at most ~96 MB at a time (emscripten's growth rule), and V8
 * answers each growth with a full GC (external memory pressure): a 2.4 GB model's load grew it
 * ~25 times and spent ~0.5 s in those. Skipped where the heap could not surely grow by `bytes`
 * (a failed allocation aborts the wasm module), and off wasm. The memory stays the heap's:
 * freed, it is what the pieces are allocated from.
 */
export const reserveHeap = (bytes: number): void => {
  if (!isWasm() || wasmBackend().wasm.HEAPU8.length + bytes > WASM_HEAP_MAX) return
  uninitialized([Math.ceil(bytes / 4)]).dispose()
}

/** The byte offset of a tensor's values in the wasm heap. */
export const heapOffset = (t: tf.Tensor): number => {
  const info = wasmBackend().dataIdMap.get(t.dataId)
  if (info === undefined) throw new Error("a tensor that is not on the wasm backend")
  return info.memoryOffset
}

/** The whole wasm heap as floats, valid until the next tfjs call that allocates. */
export const heapFloats = (): Float32Array => wasmBackend().wasm.HEAPF32

/**
 * A hand-assembled module (gemmKernel.ts, transposeKernel.ts) that imports the wasm backend's
 * memory as `env.memory`, so its functions work on tensors where they live, by byte offset: a
 * getter of its exports, instantiated once per memory; null off the wasm backend, or where the
 * bytes do not validate (a runtime without wasm SIMD).
 */
export const heapModule = (bytes: () => Uint8Array): (() => Record<string, unknown> | null) => {
  let bound: { readonly memory: object | undefined; readonly exports: Record<string, unknown> | null } | undefined
  return () => {
    if (!isWasm()) return null
    const memory = wasmBackend().wasm.asm?.memory
    if (bound !== undefined && bound.memory === memory) return bound.exports
    const code = bytes()
    const exports = memory === undefined || !WebAssembly.validate(code) ? null : new WebAssembly.Instance(new WebAssembly.Module(code), { env: { memory } }).exports
    bound = { memory, exports }
    return exports
  }
}

/** A float32 tensor holding a copy of `data` (which the caller may reuse right away). */
export const upload = <R extends tf.Rank>(data: Float32Array, shape: ReadonlyArray<number>): tf.Tensor<R> =>
  tf.tensor(isWasm() ? data : data.slice(), shape as Array<number>, "float32") as unknown as tf.Tensor<R>

/**
 * Runs a custom gradient's body the way tfjs does not: inside a tidy (tfjs calls a custom
 * gradient outside any, so its temporaries would live until the whole backward pass ends), and
 * then frees `dy` and the op's saved tensors (tfjs keeps both until then too, though nothing
 * reads them again: each op's gradient runs once). So the backward pass frees each layer's
 * activations as it goes, and a micro-batch needs the forward pass's memory, not about twice it.
 * The gradients returned must not be `dy` itself.
 */
export const backward = <T extends tf.Tensor | Array<tf.Tensor>>(dy: tf.Tensor, saved: ReadonlyArray<tf.Tensor>, body: () => T): T => {
  const grads = tf.tidy(body)
  tf.dispose([dy, ...saved])
  return grads
}

/**
 * Reusable Float32Arrays by name, grown (never shrunk) on demand: for data that dies before the
 * next call with the same name.
 */
export class Scratch {
  private readonly buffers = new Map<string, Float32Array>()

  get(name: string, size: number): Float32Array {
    let b = this.buffers.get(name)
    if (b === undefined || b.length < size) {
      b = new Float32Array(Math.max(size, Math.ceil((b?.length ?? 0) * 1.5)))
      this.buffers.set(name, b)
    }
    return b.subarray(0, size)
  }
}

/**
 * A free list of Float32Arrays for data that outlives one call (activations kept from a forward
 * pass for its backward pass): `take` one, `give` it back when done. Arrays never given back
 * are simply garbage-collected.
 */
export class BufferPool {
  private readonly free: Array<Float32Array> = []

  take(size: number): Float32Array {
    let best = -1
    for (let i = 0; i < this.free.length; i++) {
      const len = this.free[i]!.length
      if (len >= size && (best < 0 || len < this.free[best]!.length)) best = i
    }
    if (best < 0) return new Float32Array(size)
    const [b] = this.free.splice(best, 1)
    return b!.subarray(0, size)
  }

  give(...buffers: ReadonlyArray<Float32Array>): void {
    // Keep the whole underlying array so the next `take` can use all of it.
    for (const b of buffers) if (this.free.length < 64) this.free.push(new Float32Array(b.buffer, 0, b.buffer.byteLength / 4))
  }
}
