/**
 * The decode path on WebGPU: the transformer's inference pass as ~9 compute shaders per layer
 * (webgpuKernels.ts, webgpuProducts.ts) recorded straight onto the device tfjs runs on. tfjs
 * spends 47–85 µs of CPU to queue each of its ops on an H200 (bench/gpu), and a decoding step
 * through tfjs ops queues ~860 of them; here a step is one buffer write, ~9 × layers dispatches
 * with pipelines and bind groups made once, one submit and one read back. It is the one decode
 * path on WebGPU.
 *
 *   weights     a copy per policy version in [out, in] layout (webgpuWeights.ts), made by tfjs
 *               ops on the device from the model's variables (merged with LoRA adapters)
 *   KV caches   a key and a value pool of rows per layer; a sequence's cache is a range of rows
 *               (kvRows.ts)
 *   a step      the chunks' new tokens as rows in chunk order; every row attends to its own
 *               cache up to its position, so prompts and decoding tokens share one pass
 *
 * Tests hold its logits to a reference decoder of plain tfjs ops (test/policy/reference/
 * tensorDecoder.ts, itself held to fastDecode.ts) on a real WebGPU device (Mesa's lavapipe).
 */
import * as tf from "@tensorflow/tfjs"
import { type ModelConfig, parameterShapes } from "./config.js"
import { ropeTable } from "./ops.js"
import { KvRows, type TensorChunk } from "./kvRows.js"
import { type Pick, readDraw, type StepRow, type StepRows } from "./deviceDraw.js"
import type { Transformer } from "./transformer.js"
import { checkWeights, type Weights } from "./weights.js"
import * as K from "./webgpuKernels.js"
import * as Products from "./webgpuProducts.js"
import { type DeviceWeights, deviceWeights } from "./webgpuWeights.js"

// GPUBufferUsage and GPUMapMode flags (fixed by the WebGPU spec).
const MAP_READ = 0x1
const COPY_SRC = 0x4
const COPY_DST = 0x8
const STORAGE = 0x80

/** Why this decoder cannot run a model's shapes, or undefined when it can. */
export const webgpuDecodeUnsupported = (c: ModelConfig): string | undefined => {
  const hd4 = c.headDim / 4
  if (c.dModel % 4 !== 0 || c.dFf % 4 !== 0 || c.headDim % 4 !== 0) return `hidden_size (${c.dModel}), intermediate_size (${c.dFf}) and head_dim (${c.headDim}) must be multiples of 4`
  if (256 % hd4 !== 0) return `head_dim (${c.headDim}) must divide 1024`
  return undefined
}

/** When a product runs `tiledLinear` rather than `linear`: at least this many rows and tiles. */
export interface TiledFrom {
  readonly rows: number
  readonly tiles: number
}

/**
 * From 32 rows `linear` reads each weight four times or more, where `tiledLinear` reads it once
 * and wastes at most half its multiply-adds; ~64 tiles keep a GPU's compute units busy, and with
 * fewer `linear`'s many small workgroups do better. (A guess from the kernels' arithmetic, to be
 * tuned on a GPU.)
 */
const TILED_FROM: TiledFrom = { rows: 32, tiles: 64 }

/** A shader's pipeline and the workgroups of one dispatch of it. */
interface Dispatch {
  readonly pipeline: GPUComputePipeline
  readonly group: GPUBindGroup
  readonly size: (rows: number, last: number, draws: number) => readonly [number, number]
}

/** A step's working buffers for up to `rows` tokens and `last` chunks, and the dispatches over them. */
interface Scratch {
  readonly rows: number
  readonly last: number
  readonly buffers: ReadonlyArray<GPUBuffer>
  readonly info: GPUBuffer
  readonly logits: GPUBuffer
  readonly draws: GPUBuffer
  readonly plan: ReadonlyArray<Dispatch>
}

export class WebGpuDecoder {
  readonly config: ModelConfig
  private readonly device: GPUDevice
  private weights: DeviceWeights
  private readonly keys: ReadonlyArray<GPUBuffer>
  private readonly values: ReadonlyArray<GPUBuffer>
  readonly kv: KvRows
  private readonly rope: GPUBuffer
  private readonly zeros: GPUBuffer
  private readonly pipelines: Readonly<Record<"embed" | "norm" | "lastNorm" | "qkvPost" | "attention" | "swiglu" | "sample", GPUComputePipeline>>
  /** Each product's two shaders: for few rows (`linear`) and for many (`tiledLinear`). */
  private readonly products: Readonly<Record<"qkv" | "o" | "gateUp" | "down" | "head", readonly [GPUComputePipeline, GPUComputePipeline]>>
  /** The fewest rows, and 64 × 64 tiles of out, for which a product runs tiled. */
  private readonly tiledFrom: TiledFrom
  /** The scratch of the largest step so far (grown in powers of two). */
  private scratch: Scratch | undefined
  /** Resolves once the shaders compiled; rejects with the device's message if one did not. */
  private readonly compiled: Promise<void>
  /** Read-back buffers no step is using: a new mappable buffer per step would cost the driver an allocation each time. */
  private readonly readbacks: Array<GPUBuffer> = []
  private disposed = false

  constructor(model: Transformer, public version: number, options: { readonly kvBytes: number; readonly maxSequences: number; readonly tiledFrom?: TiledFrom }) {
    const c = (this.config = model.config)
    const unsupported = webgpuDecodeUnsupported(c)
    if (unsupported !== undefined) throw new RangeError(`the WebGPU decoder cannot run this model: ${unsupported}`)
    this.device = (tf.backend() as unknown as { device?: GPUDevice }).device!
    if (this.device === undefined) throw new Error("the WebGPU decoder needs tfjs's webgpu backend")
    const limits = this.device.limits
    const largest = 4 * c.dModel * Math.max(c.vocabSize, 2 * c.dFf, c.qDim + 2 * c.kvDim)
    const most = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize)
    if (largest > most) throw new RangeError(`the WebGPU decoder needs buffers of ${largest} bytes (the largest weight matrix), and this device binds at most ${most}`)
    const rowBytes = c.kvDim * 4
    this.kv = new KvRows(c.contextLength, Math.floor(Math.min(options.kvBytes / (c.nLayers * 2), limits.maxStorageBufferBindingSize) / rowBytes), options.maxSequences)
    const pool = () => this.device.createBuffer({ size: Math.max(this.kv.rows, 1) * rowBytes, usage: STORAGE })
    this.keys = Array.from({ length: c.nLayers }, pool)
    this.values = Array.from({ length: c.nLayers }, pool)
    const table = ropeTable(c.contextLength, c.headDim, c.ropeTheta, c.ropeScaling)
    const cs = new Float32Array(2 * table.cos.length)
    cs.set(table.cos)
    cs.set(table.sin, table.cos.length)
    this.rope = this.upload(cs)
    const H = c.nHeads
    const KV = c.kvHeads
    const widest = Math.max(c.qDim + 2 * c.kvDim, c.dModel, 2 * c.dFf, c.vocabSize)
    this.zeros = this.device.createBuffer({ size: widest * 4, usage: STORAGE })
    this.device.pushErrorScope("validation")
    const make = (code: string) => this.device.createComputePipeline({ layout: "auto", compute: { module: this.device.createShaderModule({ code }), entryPoint: "main" } })
    const d = c.dModel
    this.pipelines = {
      embed: make(K.embedShader(d)),
      norm: make(K.rmsNormShader(d, c.normEps, false)),
      lastNorm: make(K.rmsNormShader(d, c.normEps, true)),
      qkvPost: make(K.qkvShader({ H, KV, HD: c.headDim, context: c.contextLength, eps: c.normEps, qkNorm: c.qkNorm === true })),
      attention: make(K.attentionShader({ H, KV, HD: c.headDim })),
      swiglu: make(K.swigluShader(c.dFf)),
      sample: make(K.sampleShader(c.vocabSize))
    }
    const product = (k: number, n: number, options: Products.ProductOptions) => [make(Products.linearShader(k, n, options)), make(Products.tiledLinearShader(k, n, options))] as const
    this.products = {
      qkv: product(d, c.qDim + 2 * c.kvDim, { accumulate: false, rows: "info[0]" }),
      o: product(c.qDim, d, { accumulate: true, rows: "info[0]" }),
      gateUp: product(d, 2 * c.dFf, { accumulate: false, rows: "info[0]" }),
      down: product(c.dFf, d, { accumulate: true, rows: "info[0]" }),
      head: product(d, c.vocabSize, { accumulate: false, rows: "info[1]" })
    }
    this.tiledFrom = options.tiledFrom ?? TILED_FROM
    this.compiled = this.device.popErrorScope().then((e) => {
      if (e !== null) throw new Error(`the WebGPU decoder's shaders did not compile: ${e.message}`)
    })
    this.compiled.catch(() => {})
    this.weights = weightsOf(model)
  }

  /** New weights: a model's current variables (merged with its adapters), or plain weights. */
  setWeights(source: Transformer | Weights, version: number, fromModel: boolean): void {
    const weights = fromModel ? weightsOf(source as Transformer) : uploadedWeights(this.config, source as Weights)
    const old = this.weights
    this.weights = weights
    this.version = version
    this.scratch = this.scratch === undefined ? undefined : this.makeScratch(this.scratch.rows, this.scratch.last)
    // steps already queued read the old copy: it goes once the device is done with them
    void this.device.queue.onSubmittedWorkDone().then(() => tf.dispose([...old.refs]))
  }

  /**
   * Appends every chunk's ids to its cache; resolves, per chunk, to the logits of its last id, or
   * to the token drawn on the device where `picks[i]` is given (deviceDraw.ts).
   */
  forward(chunks: ReadonlyArray<TensorChunk>, picks: ReadonlyArray<Pick | undefined> = []): Promise<StepRows> {
    const c = this.config
    for (const { cache, ids } of chunks) {
      if (cache.length + ids.length > cache.capacity) throw new RangeError(`a cache of ${cache.capacity} tokens cannot take ${ids.length} more after ${cache.length}`)
      for (const id of ids) if (!(id >= 0 && id < c.vocabSize)) throw new RangeError(`token id ${id} is outside the vocabulary (${c.vocabSize})`)
    }
    const M = chunks.reduce((s, ch) => s + ch.ids.length, 0)
    const P = chunks.length
    if (M === 0) return Promise.resolve([])
    const device = this.device
    // one scope over the step's commands (and any scratch it grows): an invalid one is an error, not zeros
    device.pushErrorScope("validation")
    let scratch: Scratch
    try {
      scratch = this.scratchFor(M, P)
    } catch (e) {
      void device.popErrorScope()
      throw e
    }
    const drawn = chunks.flatMap((_, i) => (picks[i] !== undefined ? [i] : []))
    const whole = chunks.flatMap((_, i) => (picks[i] === undefined ? [i] : []))
    const last = K.META_ROWS + 4 * scratch.rows
    const pickAt = last + scratch.last
    const info = new Uint32Array(pickAt + 3 * scratch.last)
    const bits = new Float32Array(info.buffer)
    info.set([M, P, last, pickAt])
    let r = 0
    chunks.forEach(({ cache, ids }, i) => {
      for (let t = 0; t < ids.length; t++, r++) info.set([ids[t]!, cache.length + t, cache.start + cache.length + t, cache.start], K.META_ROWS + 4 * r)
      info[last + i] = r - 1
    })
    drawn.forEach((i, j) => {
      const pick = picks[i]!
      info[pickAt + 3 * j] = i
      bits[pickAt + 3 * j + 1] = pick.temperature > 0 ? pick.temperature : 1
      bits[pickAt + 3 * j + 2] = pick.u
    })
    device.queue.writeBuffer(scratch.info, 0, info)
    const encoder = device.createCommandEncoder()
    const pass = encoder.beginComputePass()
    for (const { pipeline, group, size } of scratch.plan) {
      const [x, y] = size(M, P, drawn.length)
      if (x === 0 || y === 0) continue
      pass.setPipeline(pipeline)
      pass.setBindGroup(0, group)
      pass.dispatchWorkgroups(x, y)
    }
    pass.end()
    const V = c.vocabSize
    const drawBytes = drawn.length * 16
    const bytes = drawBytes + whole.length * V * 4
    const read = this.takeReadback(bytes)
    if (drawBytes > 0) encoder.copyBufferToBuffer(scratch.draws, 0, read, 0, drawBytes)
    whole.forEach((i, j) => encoder.copyBufferToBuffer(scratch.logits, i * V * 4, read, drawBytes + j * V * 4, V * 4))
    device.queue.submit([encoder.finish()])
    const checked = device.popErrorScope()
    for (const { cache, ids } of chunks) cache.length += ids.length
    let reusable = false
    return Promise.all([this.compiled, checked, read.mapAsync(MAP_READ, 0, bytes)])
      .then(([, error]) => {
        if (error !== null) throw new Error(`the WebGPU decoder's step failed validation: ${error.message}`)
        const values = new Float32Array(read.getMappedRange(0, bytes).slice(0))
        read.unmap()
        reusable = true
        const out = new Array<StepRow>(P)
        drawn.forEach((i, j) => (out[i] = readDraw(values, j, picks[i]!, V)))
        whole.forEach((i, j) => (out[i] = values.subarray(drawn.length * 4 + j * V, drawn.length * 4 + (j + 1) * V)))
        return out
      })
      .finally(() => (reusable ? this.giveReadback(read) : read.destroy()))
  }

  dispose(): void {
    this.disposed = true
    for (const b of this.readbacks.splice(0)) b.destroy()
    this.freeScratch()
    for (const b of [...this.keys, ...this.values, this.rope, this.zeros]) b.destroy()
    tf.dispose([...this.weights.refs])
  }

  private upload(data: Float32Array): GPUBuffer {
    const buffer = this.device.createBuffer({ size: Math.max(data.byteLength, 4), usage: STORAGE | COPY_DST })
    this.device.queue.writeBuffer(buffer, 0, data)
    return buffer
  }

  /** The smallest free read-back buffer of at least `bytes` (they are kept largest first), or a new one (in powers of two). */
  private takeReadback(bytes: number): GPUBuffer {
    const i = this.readbacks.findLastIndex((b) => b.size >= bytes)
    if (i >= 0) return this.readbacks.splice(i, 1)[0]!
    return this.device.createBuffer({ size: 2 ** Math.ceil(Math.log2(Math.max(bytes, 256))), usage: MAP_READ | COPY_DST })
  }

  /** Keeps a read-back buffer for the next steps: the four largest (steps in flight at once rarely exceed that). */
  private giveReadback(buffer: GPUBuffer): void {
    if (this.disposed) return buffer.destroy()
    this.readbacks.push(buffer)
    this.readbacks.sort((a, b) => b.size - a.size)
    for (const spare of this.readbacks.splice(4)) spare.destroy()
  }

  /** Scratch for a step of `rows` tokens and `last` chunks, grown (in powers of two) as needed. */
  private scratchFor(rows: number, last: number): Scratch {
    const s = this.scratch
    if (s !== undefined && s.rows >= rows && s.last >= last) return s
    const grown = (need: number, have = 0) => Math.max(have, 2 ** Math.ceil(Math.log2(need)))
    this.scratch = this.makeScratch(grown(rows, s?.rows), grown(last, s?.last))
    return this.scratch
  }

  private freeScratch(): void {
    const s = this.scratch
    if (s === undefined) return
    // a step in flight may still use them
    void this.device.queue.onSubmittedWorkDone().then(() => s.buffers.forEach((b) => b.destroy()))
  }

  private makeScratch(rows: number, last: number): Scratch {
    this.freeScratch()
    const c = this.config
    const d = c.dModel
    const F = c.dFf
    const QKV = c.qDim + 2 * c.kvDim
    const buffer = (floats: number, usage = STORAGE) => this.device.createBuffer({ size: Math.max(floats, 1) * 4, usage })
    const x = buffer(rows * d)
    const h = buffer(rows * d)
    const qkv = buffer(rows * QKV)
    const att = buffer(rows * c.qDim)
    const gu = buffer(rows * 2 * F)
    const act = buffer(rows * F)
    const hl = buffer(last * d)
    const logits = buffer(last * c.vocabSize, STORAGE | COPY_SRC)
    const draws = buffer(last * 4, STORAGE | COPY_SRC)
    const info = buffer(K.META_ROWS + 4 * rows + 4 * last, STORAGE | COPY_DST)
    const w = this.weights
    const p = this.pipelines
    const dispatch = (pipeline: GPUComputePipeline, buffers: ReadonlyArray<GPUBuffer>, size: Dispatch["size"]): Dispatch => ({
      pipeline,
      group: this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [info, ...buffers].map((buffer, binding) => ({ binding, resource: { buffer } })) }),
      size
    })
    const perRow = (width: number) => (M: number) => [Math.ceil(width / 256), M] as const
    /** A product over `rows` of the step (its rows M, or its chunks P): one of its two shaders runs. */
    const linear = (pipelines: readonly [GPUComputePipeline, GPUComputePipeline], buffers: ReadonlyArray<GPUBuffer>, outputs: number, rows: (M: number, P: number) => number = (M) => M) => {
      const tiled = (m: number) => m >= this.tiledFrom.rows && Math.ceil(m / Products.TILE) * Math.ceil(outputs / Products.TILE) >= this.tiledFrom.tiles
      return [
        dispatch(pipelines[0], buffers, (M, P) => (tiled(rows(M, P)) ? [0, 0] : [Math.ceil(outputs / Products.LINEAR_OUTPUTS), Math.ceil(rows(M, P) / Products.LINEAR_ROW_TILE)])),
        dispatch(pipelines[1], buffers, (M, P) => (tiled(rows(M, P)) ? [Math.ceil(outputs / Products.TILE), Math.ceil(rows(M, P) / Products.TILE)] : [0, 0]))
      ]
    }
    const q = this.products
    const H = c.nHeads
    const plan: Array<Dispatch> = [dispatch(p.embed, [w.embed, x], perRow(d))]
    w.layers.forEach((lw, l) => {
      plan.push(
        dispatch(p.norm, [x, lw.attnNorm, h], (M) => [M, 1]),
        ...linear(q.qkv, [h, lw.qkv, lw.qkvBias, qkv], QKV),
        dispatch(p.qkvPost, [qkv, lw.qNorm, lw.kNorm, this.rope, this.keys[l]!, this.values[l]!], (M) => [H + 2 * c.kvHeads, M]),
        dispatch(p.attention, [qkv, this.keys[l]!, this.values[l]!, att], (M) => [H, M]),
        ...linear(q.o, [att, lw.o, lw.oBias, x], d),
        dispatch(p.norm, [x, lw.mlpNorm, h], (M) => [M, 1]),
        ...linear(q.gateUp, [h, lw.gateUp, this.zeros, gu], 2 * F),
        dispatch(p.swiglu, [gu, act], perRow(F)),
        ...linear(q.down, [act, lw.down, this.zeros, x], d)
      )
    })
    plan.push(
      dispatch(p.lastNorm, [x, w.norm, hl], (_, P) => [P, 1]),
      ...linear(q.head, [hl, w.head, this.zeros, logits], c.vocabSize, (_, P) => P),
      dispatch(p.sample, [logits, draws], (_, __, D) => [D, 1])
    )
    return { rows, last, buffers: [x, h, qkv, att, gu, act, hl, logits, draws, info], info, logits, draws, plan }
  }
}

/** A model's weights as the decoder copies them: its variables, merged with its LoRA adapters. */
const weightsOf = (model: Transformer): DeviceWeights => {
  const merged = model.mergedTensors()
  try {
    return deviceWeights(model.config, (name) => merged.get(name) ?? model.params.get(name)!)
  } finally {
    tf.dispose([...merged.values()])
  }
}

/** Plain weights by name, uploaded for the copy. */
const uploadedWeights = (c: ModelConfig, weights: Weights): DeviceWeights => {
  const shapes = parameterShapes(c)
  checkWeights(shapes, weights)
  const tensors = new Map(Object.keys(shapes).map((name) => [name, tf.tensor(weights[name]!, [...shapes[name]!])] as const))
  try {
    return deviceWeights(c, (name) => tensors.get(name)!)
  } finally {
    tf.dispose([...tensors.values()])
  }
}
