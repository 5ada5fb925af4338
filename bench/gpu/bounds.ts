/**
 * The device's own bounds, measured by the check in the same run, on the backend under test:
 *
 *   matmul    fp32 rank-2 `tf.matMul` FLOP/s, the best of a few square sizes (the largest the
 *             backend's memory allows: 4096 on a GPU, 1024 elsewhere) — the bound of prefill,
 *             batched decoding and training
 *   bandwidth GB/s of `tf.add` over two large tensors (two reads and one write per element) and
 *             of `tf.sum` over one (one read), the better of the two — the bound of decoding one
 *             sequence, which reads every weight once per token
 *
 * Every timing ends with an asynchronous read of a scalar derived from the result (`data()`),
 * which works on every backend (WebGPU has no synchronous read) and waits for the work queued.
 * On a GPU the check warms the device up first (`warmUp`), so its clocks are up when measured.
 */
import * as tf from "@tensorflow/tfjs"
import { median } from "../policy/measure.js"

/**
 * Seconds of `run` until its (scalar) result is read back; median of `reps` after 2 warm-ups.
 * With `count` > 1, that many runs are queued before the one read, and the time is per run: a
 * read's latency (~0.3 ms on WebGPU) would otherwise count against short products.
 */
const timed = async (run: () => tf.Tensor, reps: number, count = 1): Promise<number> => {
  const times: Array<number> = []
  for (let i = 0; i < reps + 2; i++) {
    const t = performance.now()
    const outs = Array.from({ length: count }, run)
    const out = outs[count - 1]!
    const scalar = out.rank === 0 ? out : tf.slice(out.reshape([-1]), [0], [1])
    await scalar.data()
    const dt = (performance.now() - t) / 1000 / count
    tf.dispose([...outs, scalar])
    if (i >= 2) times.push(dt)
  }
  return median(times)
}

/**
 * Keeps the device busy with large products for `seconds` before anything is measured: a GPU
 * idles below its clock and takes a while to come up, so a bound measured first comes out low
 * and the rates measured after it exceed it (an H200 run without this: prefill at 1.36× "the
 * bound", which was 3.8 TFLOP/s; with it, 13.5).
 */
export const warmUp = async (seconds: number, n = 4096): Promise<void> => {
  const a = tf.randomNormal([n, n]) as tf.Tensor2D
  const until = performance.now() + seconds * 1000
  while (performance.now() < until) {
    const c = tf.matMul(a, a)
    const scalar = tf.slice(c.reshape([-1]), [0], [1])
    await scalar.data()
    tf.dispose([c, scalar])
  }
  a.dispose()
}

export interface MatmulBound {
  readonly gflops: number
  readonly sizes: ReadonlyArray<{ readonly n: number; readonly gflops: number }>
}

export const matmulBound = async (options: { readonly gpu: boolean; readonly reps: number; readonly quick?: boolean }): Promise<MatmulBound> => {
  const sizes: Array<{ n: number; gflops: number }> = []
  // a quick run off a GPU is a check of the logic: tfjs's cpu backend takes seconds for 1024³
  for (const n of options.gpu ? [1024, 2048, 4096] : options.quick ? [128, 256, 512] : [256, 512, 1024]) {
    const a = tf.randomNormal([n, n]) as tf.Tensor2D
    const b = tf.randomNormal([n, n]) as tf.Tensor2D
    // on a GPU ~64 GFLOP queued per timed read, whatever the size (a CPU gets one product per read)
    const seconds = await timed(() => tf.matMul(a, b), options.reps, options.gpu ? Math.max(1, Math.round(2 ** 35 / (2 * n ** 3))) : 1)
    tf.dispose([a, b])
    sizes.push({ n, gflops: (2 * n * n * n) / seconds / 1e9 })
  }
  return { gflops: Math.max(...sizes.map((s) => s.gflops)), sizes }
}

export interface BandwidthBound {
  readonly gbps: number
  /** GB/s of each probe; `copy` (WebGPU buffer-to-buffer copies, reads and writes counted) on WebGPU only. */
  readonly probes: { readonly add: number; readonly sum: number; readonly copy?: number }
  readonly mib: number
}

/** What this uses of a WebGPU device (Dawn's, through the tfjs backend). */
interface GpuDevice {
  createBuffer(d: { size: number; usage: number }): { destroy(): void }
  createCommandEncoder(): { copyBufferToBuffer(a: unknown, ao: number, b: unknown, bo: number, size: number): void; finish(): unknown }
  readonly queue: { submit(buffers: Array<unknown>): void; onSubmittedWorkDone(): Promise<void> }
}

/** Copies per submission: enough that the submission's latency does not count (measured: ~2 ms). */
const COPIES = 16

/**
 * The card's own memory bandwidth, below any tfjs kernel: GB/s of copying `bytes` back and forth
 * between two device buffers, `COPIES` times per submission (each byte read once and written
 * once per copy), median of `reps` after 2 warm-ups.
 */
const copyBandwidth = async (device: GpuDevice, bytes: number, reps: number): Promise<number> => {
  const usage = (globalThis as unknown as { GPUBufferUsage: Record<string, number> }).GPUBufferUsage
  const flags = usage["STORAGE"]! | usage["COPY_SRC"]! | usage["COPY_DST"]!
  const from = device.createBuffer({ size: bytes, usage: flags })
  const to = device.createBuffer({ size: bytes, usage: flags })
  try {
    const times: Array<number> = []
    for (let i = 0; i < reps + 2; i++) {
      const t = performance.now()
      const encoder = device.createCommandEncoder()
      for (let k = 0; k < COPIES; k++) k % 2 === 0 ? encoder.copyBufferToBuffer(from, 0, to, 0, bytes) : encoder.copyBufferToBuffer(to, 0, from, 0, bytes)
      device.queue.submit([encoder.finish()])
      await device.queue.onSubmittedWorkDone()
      if (i >= 2) times.push((performance.now() - t) / 1000)
    }
    return (2 * COPIES * bytes) / median(times) / 1e9
  } finally {
    from.destroy()
    to.destroy()
  }
}

export const bandwidthBound = async (options: { readonly mib: number; readonly reps: number }): Promise<BandwidthBound> => {
  // No larger than WebGPU binds in one go: a larger tensor makes an invalid kernel that computes
  // nothing and throws nothing (lavapipe binds 128 MiB; its 1 GiB tf.sum "ran" at 4,501 GB/s).
  const bindable = (tf.backend() as unknown as { device?: { limits?: { maxStorageBufferBindingSize?: number } } }).device?.limits?.maxStorageBufferBindingSize
  const mib = Math.min(options.mib, bindable === undefined ? Infinity : Math.floor(bindable / 2 ** 20))
  const n = (mib * 2 ** 20) / 4
  const a = tf.randomUniform([n])
  const b = tf.randomUniform([n])
  const add = (3 * 4 * n) / (await timed(() => tf.add(a, b), options.reps)) / 1e9
  const sum = (4 * n) / (await timed(() => tf.sum(a), options.reps)) / 1e9
  tf.dispose([a, b])
  const device = tf.getBackend() === "webgpu" ? (tf.backend() as unknown as { device: GpuDevice }).device : undefined
  const copy = device === undefined ? undefined : await copyBandwidth(device, 4 * n, options.reps)
  return { gbps: Math.max(add, sum, copy ?? 0), probes: { add, sum, ...(copy === undefined ? {} : { copy }) }, mib }
}

export interface DispatchCost {
  /** Seconds from queuing one tiny op to having its value back (`await data()`). */
  readonly readbackS: number
  /** Seconds per op of a long chain of tiny ops on device-resident tensors, read back once. */
  readonly perOpS: number
  /** The same with a JS number as the second operand: tfjs uploads a new scalar for each op. */
  readonly perOpWithUploadS: number
}

/**
 * What a step of many small ops pays before any arithmetic: the latency of one asynchronous read,
 * and the cost of queuing one op, with and without a scalar upload. Decoding one sequence runs
 * hundreds of small ops per token, so these, not bandwidth, can bound it.
 */
export const dispatchCost = async (options: { readonly reps: number }): Promise<DispatchCost> => {
  const x = tf.ones([1024])
  const one = tf.ones([1024])
  const readbackS = await timed(() => tf.add(x, one), Math.max(options.reps, 10))
  const chain = 200
  const chained = (step: (y: tf.Tensor) => tf.Tensor) => () => {
    let y = x
    for (let i = 0; i < chain; i++) {
      const next = step(y)
      if (y !== x) y.dispose()
      y = next
    }
    return y
  }
  const perOpS = (await timed(chained((y) => tf.add(y, one)), options.reps)) / chain
  const perOpWithUploadS = (await timed(chained((y) => tf.add(y, 1)), options.reps)) / chain
  tf.dispose([x, one])
  return { readbackS, perOpS, perOpWithUploadS }
}
