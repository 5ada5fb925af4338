/**
 * What the policy bench measures, each the same way for every model:
 *
 *   matmul rate      tfjs rank-2 matmul FLOP/s (on wasm: XNNPACK SIMD, single-threaded) at a
 *                    model's own dense shapes, FLOP-weighted — the bound of prefill, batched
 *                    decode and training
 *   bandwidth        a streaming read of a large Float32Array in this process, GB/s — the bound of
 *                    decoding one sequence (every weight is read once per token)
 *   file read        reading a file's bytes (page cache warm, into memory already touched) — the
 *                    bound of loading a checkpoint; first-touch GB/s of fresh memory is reported
 *                    beside it (on some virtual machines page faults cost more than the reading)
 *   engine runs      prefill and decode through the real engine (`makeEngine`), timed from the
 *                    streamed chunks
 *   train steps      `trainStep` with AdamW on the model's trainable variables
 */
import { AdamW, type GenerationEngine, type ModelConfig, packSequences, Rng, trainStep, type Transformer } from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Effect, Stream } from "effect"
import * as fs from "node:fs/promises"
import { percentile } from "../report.js"

export const median = (xs: ReadonlyArray<number>) => percentile(xs, 50)

/** CPU seconds this process used (user + system) since `from`. */
export const cpuSeconds = (from: NodeJS.CpuUsage) => {
  const u = process.cpuUsage(from)
  return (u.user + u.system) / 1e6
}

/** Median seconds of `a·b` for a rank-2 shape, inputs resident, result computed (2 warm-up runs). */
const matmulSeconds = (m: number, k: number, n: number, reps: number): number => {
  const a = tf.randomNormal([m, k]) as tf.Tensor2D
  const b = tf.randomNormal([k, n]) as tf.Tensor2D
  const times: Array<number> = []
  for (let i = 0; i < reps + 2; i++) {
    const t = performance.now()
    const c = tf.matMul(a, b)
    // wasm computes synchronously; elsewhere wait for the result (reading it back).
    if (tf.getBackend() !== "wasm") c.dataSync()
    const dt = performance.now() - t
    c.dispose()
    if (i >= 2) times.push(dt / 1000)
  }
  tf.dispose([a, b])
  return median(times)
}

/** Median GFLOP/s of one rank-2 matmul shape. */
export const matmulGflops = (m: number, k: number, n: number, reps: number): number => (2 * m * k * n) / matmulSeconds(m, k, n, reps) / 1e9

export interface MatmulRate {
  readonly gflops: number
  readonly shapes: ReadonlyArray<{ readonly shape: string; readonly count: number; readonly gflops: number }>
}

/**
 * FLOP/s of the model's dense products over `rows` rows — fused q/k/v, o, gate and up, down, per
 * layer, and the head over `headRows` rows — as total FLOPs / total time, each shape counted as
 * often as a forward pass runs it.
 */
export const modelMatmulRate = (c: ModelConfig, rows: number, headRows: number, reps: number): MatmulRate => {
  const d = c.dModel
  const shapes: Array<[m: number, k: number, n: number, count: number]> = [
    [rows, d, c.qDim + 2 * c.kvDim, c.nLayers],
    [rows, c.qDim, d, c.nLayers],
    [rows, d, c.dFf, 2 * c.nLayers],
    [rows, c.dFf, d, c.nLayers],
    [headRows, d, c.vocabSize, 1]
  ]
  let flops = 0
  let seconds = 0
  const out = shapes.map(([m, k, n, count]) => {
    const s = matmulSeconds(m, k, n, reps)
    flops += count * 2 * m * k * n
    seconds += count * s
    return { shape: `${m}x${k}x${n}`, count, gflops: (2 * m * k * n) / s / 1e9 }
  })
  return { gflops: flops / seconds / 1e9, shapes: out }
}

export interface Bandwidth {
  readonly gbps: number
  readonly probes: Readonly<Record<string, number>>
}

/**
 * Read bandwidth (GB/s, 1e9 bytes) of one thread of this process over a Float32Array of `mib`
 * MiB (far larger than any cache), best of `reps` passes for each of: a JS loop, tfjs's sum on
 * the backend (wasm: its own memory), and a native compare of two equal copies (memcmp; both
 * copies read). The bound is the fastest of them.
 */
export const memoryBandwidth = (mib: number, reps: number): Bandwidth => {
  const n = (mib * 2 ** 20) / 4
  const a = new Float32Array(n)
  for (let i = 0; i < n; i++) a[i] = i & 1023
  const best = (bytes: number, run: () => void) => {
    let fastest = Infinity
    for (let r = 0; r < reps; r++) {
      const t = performance.now()
      run()
      fastest = Math.min(fastest, (performance.now() - t) / 1000)
    }
    return bytes / fastest / 1e9
  }
  let sink = 0
  const jsLoop = best(a.byteLength, () => {
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0
    for (let i = 0; i < n; i += 4) {
      s0 += a[i]!
      s1 += a[i + 1]!
      s2 += a[i + 2]!
      s3 += a[i + 3]!
    }
    sink += s0 + s1 + s2 + s3
  })
  const t = tf.tensor1d(a)
  const tfSum = best(a.byteLength, () => {
    const s = tf.sum(t)
    sink += s.dataSync()[0]!
    s.dispose()
  })
  t.dispose()
  const b = Buffer.from(new Uint8Array(a.buffer).slice())
  const view = Buffer.from(a.buffer)
  const memcmp = best(2 * a.byteLength, () => {
    sink += Buffer.compare(view, b)
  })
  if (Number.isNaN(sink)) throw new Error("unreachable: keeps the loops from being optimised away")
  const probes = { js_loop: jsLoop, tfjs_sum: tfSum, native_memcmp: memcmp }
  return { gbps: Math.max(jsLoop, tfSum, memcmp), probes }
}

/**
 * GB/s of reading `file` into memory already touched (best of `reps`; a first pass warms the
 * page cache): what loading could reach if nothing but the bytes had to move.
 */
export const fileReadGbps = async (file: string, reps: number): Promise<number> => {
  const handle = await fs.open(file, "r")
  try {
    const { size } = await handle.stat()
    const buf = Buffer.alloc(size)
    let fastest = Infinity
    for (let r = 0; r < reps + 1; r++) {
      const t = performance.now()
      for (let off = 0; off < size;) off += (await handle.read(buf, off, Math.min(1 << 24, size - off), off)).bytesRead
      if (r > 0) fastest = Math.min(fastest, (performance.now() - t) / 1000)
    }
    return size / fastest / 1e9
  } finally {
    await handle.close()
  }
}

// The one part of the WebAssembly JS API used here (TypeScript's "dom" lib is not loaded).
const Wasm = (globalThis as unknown as { WebAssembly: { Memory: new (d: { initial: number }) => { buffer: ArrayBuffer } } }).WebAssembly

/**
 * GB/s of the first touch of fresh memory (page faults): the best of `samples` new WebAssembly
 * memories of `mib` MiB, each written once, all kept until the last is measured. WebAssembly
 * memory because the loader writes the weights into the wasm heap's fresh pages, and because
 * the C allocator behind a Float32Array may hand back pages it has touched before: one such
 * sample here read 13.6 GB/s beside five of 2.1–2.5. Taken before the load, while nothing large
 * is garbage: one allocation timed right after a 2.4 GB buffer had become garbage also timed the
 * collector freeing it (0.3 GB/s, against 1.5–2.6 a moment later; 2026-12-07).
 */
export const firstTouchGbps = (mib: number, samples: number): { readonly gbps: number; readonly samples: ReadonlyArray<number> } => {
  const kept: Array<unknown> = []
  const rates: Array<number> = []
  for (let i = 0; i < samples; i++) {
    const t = performance.now()
    const memory = new Wasm.Memory({ initial: (mib * 2 ** 20) / 65536 })
    new Float32Array(memory.buffer).fill(1)
    rates.push((mib * 2 ** 20) / ((performance.now() - t) / 1000) / 1e9)
    kept.push(memory)
  }
  return { gbps: Math.max(...rates), samples: rates }
}

/** A sampled request (no stop) with a pseudo-random prompt over the whole vocabulary. */
export const benchRequest = (id: string, seed: number, prompt: number, newTokens: number, vocab: number) => {
  const rng = new Rng(seed)
  return new GenerateRequest({
    requestId: id,
    promptIds: Int32Array.from({ length: prompt }, () => rng.nextUint32() % vocab),
    params: new SamplingParams({ maxTokens: newTokens, temperature: 1, topP: 1, topK: 0, seed, stop: [], topLogprobs: 0 })
  })
}

export interface EngineRun {
  /** From the start to the first token of every sequence (the prefills). */
  readonly firstTokenS: number
  /** Tokens per second after every sequence had its first token (the decode phase). */
  readonly decodeTokPerS: number
  readonly tokens: number
  readonly seconds: number
}

let runs = 0

/** Runs `n` requests at once through the engine, timing each streamed chunk. */
export const engineRun = (engine: GenerationEngine, n: number, prompt: number, newTokens: number, vocab: number) =>
  Effect.gen(function* () {
    const tag = `run${runs++}`
    const start = performance.now()
    const firsts: Array<number> = []
    let last = start
    let tokens = 0
    yield* Effect.forEach(
      Array.from({ length: n }, (_, i) => benchRequest(`${tag}-${i}`, runs * 1000 + i, prompt, newTokens, vocab)),
      (r) => {
        let first = true
        return engine.generate(r).pipe(
          Stream.runForEach((chunk) =>
            Effect.sync(() => {
              const now = performance.now()
              if (first) firsts.push(now)
              first = false
              tokens += chunk.outputIds.length
              last = now
            })
          )
        )
      },
      { concurrency: "unbounded", discard: true }
    )
    const firstAll = Math.max(...firsts)
    const decodeTokens = tokens - n
    return {
      firstTokenS: (firstAll - start) / 1000,
      decodeTokPerS: decodeTokens > 0 && last > firstAll ? decodeTokens / ((last - firstAll) / 1000) : NaN,
      tokens,
      seconds: (last - start) / 1000
    } satisfies EngineRun
  })

export interface TrainRun {
  readonly seconds: number
  readonly fastest: number
  readonly cpuSeconds: number
  readonly times: ReadonlyArray<number>
  readonly loss: number
  readonly microBatches: number
}

/** `steps` SFT steps (after `warmup` more) over `rows` × `seqLen` random tokens; median seconds. */
export const measureTrain = async (
  model: Transformer,
  options: { readonly rows: number; readonly seqLen: number; readonly steps: number; readonly warmup: number; readonly lr: number; readonly microBatchTokens?: number }
): Promise<TrainRun> => {
  const { rows, seqLen } = options
  const rng = new Rng(1)
  const sequences = Array.from({ length: rows }, () => ({
    tokens: Int32Array.from({ length: seqLen + 1 }, () => rng.nextUint32() % model.config.vocabSize),
    weights: new Float32Array(seqLen + 1).fill(1 / (rows * seqLen))
  }))
  const batches = packSequences(sequences, { maxTokens: options.microBatchTokens ?? 16 * 256, maxSeqLen: seqLen })
  const optimizer = new AdamW(model.trainable, { lr: options.lr, maxGradNorm: 1 })
  try {
    for (let i = 0; i < options.warmup; i++) await trainStep(model, optimizer, batches, { kind: "sft" })
    const times: Array<number> = []
    const cpu: Array<number> = []
    let loss = 0
    for (let i = 0; i < options.steps; i++) {
      const c = process.cpuUsage()
      const s = await trainStep(model, optimizer, batches, { kind: "sft" })
      cpu.push(cpuSeconds(c))
      times.push(s.seconds)
      loss = s.loss
    }
    return { seconds: median(times), fastest: Math.min(...times), cpuSeconds: median(cpu), times, loss, microBatches: batches.length }
  } finally {
    optimizer.dispose()
  }
}
