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
 */
import * as tf from "@tensorflow/tfjs"
import { median } from "../policy/measure.js"

/** Seconds of `run` until its (scalar) result is read back; median of `reps` after 2 warm-ups. */
const timed = async (run: () => tf.Tensor, reps: number): Promise<number> => {
  const times: Array<number> = []
  for (let i = 0; i < reps + 2; i++) {
    const t = performance.now()
    const out = run()
    const scalar = out.rank === 0 ? out : tf.slice(out.reshape([-1]), [0], [1])
    await scalar.data()
    const dt = (performance.now() - t) / 1000
    tf.dispose([out, scalar])
    if (i >= 2) times.push(dt)
  }
  return median(times)
}

export interface MatmulBound {
  readonly gflops: number
  readonly sizes: ReadonlyArray<{ readonly n: number; readonly gflops: number }>
}

export const matmulBound = async (options: { readonly gpu: boolean; readonly reps: number }): Promise<MatmulBound> => {
  const sizes: Array<{ n: number; gflops: number }> = []
  for (const n of options.gpu ? [1024, 2048, 4096] : [256, 512, 1024]) {
    const a = tf.randomNormal([n, n]) as tf.Tensor2D
    const b = tf.randomNormal([n, n]) as tf.Tensor2D
    const seconds = await timed(() => tf.matMul(a, b), options.reps)
    tf.dispose([a, b])
    sizes.push({ n, gflops: (2 * n * n * n) / seconds / 1e9 })
  }
  return { gflops: Math.max(...sizes.map((s) => s.gflops)), sizes }
}

export interface BandwidthBound {
  readonly gbps: number
  readonly probes: { readonly add: number; readonly sum: number }
  readonly mib: number
}

export const bandwidthBound = async (options: { readonly mib: number; readonly reps: number }): Promise<BandwidthBound> => {
  const n = (options.mib * 2 ** 20) / 4
  const a = tf.randomUniform([n])
  const b = tf.randomUniform([n])
  const add = (3 * 4 * n) / (await timed(() => tf.add(a, b), options.reps)) / 1e9
  const sum = (4 * n) / (await timed(() => tf.sum(a), options.reps)) / 1e9
  tf.dispose([a, b])
  return { gbps: Math.max(add, sum), probes: { add, sum }, mib: options.mib }
}
