/**
 * AdamW (decoupled weight decay) with clipping by global gradient norm, and learning-rate
 * schedules. Weight decay applies to matrices and embedding tables only (rank ≥ 2), never to
 * norm scales or shifts. The moments live in tf variables next to the parameters; `exportState`
 * / `importState` move them (with the step count) in and out of a checkpoint, `snapshot` keeps
 * them on the backend for a rollback.
 */
import * as tf from "@tensorflow/tfjs"
import { Data } from "effect"
import { upload } from "../model/heap.js"

export class OptimizerError extends Data.TaggedError("OptimizerError")<{ readonly message: string }> {}

/** Learning rate as a function of the step (0-based: the rate used by the step'th update). */
export type Schedule = (step: number) => number

export interface ScheduleOptions {
  readonly peak: number
  /** Linear warmup from 0 over this many steps (default 0). */
  readonly warmupSteps?: number
  /** "constant" after warmup (default), or "cosine" decay to `minRatio`·peak at `totalSteps`. */
  readonly kind?: "constant" | "cosine"
  readonly totalSteps?: number
  readonly minRatio?: number
}

export const schedule = (o: ScheduleOptions): Schedule => {
  const warmup = o.warmupSteps ?? 0
  const minRatio = o.minRatio ?? 0.1
  return (step) => {
    if (step < warmup) return (o.peak * (step + 1)) / warmup
    if (o.kind !== "cosine") return o.peak
    const total = o.totalSteps ?? warmup + 1
    const progress = Math.min(1, (step - warmup) / Math.max(1, total - warmup))
    return o.peak * (minRatio + (1 - minRatio) * 0.5 * (1 + Math.cos(Math.PI * progress)))
  }
}

export interface AdamWOptions {
  readonly lr: number | Schedule
  readonly beta1?: number
  readonly beta2?: number
  readonly eps?: number
  readonly weightDecay?: number
  /** Clip gradients to this global L2 norm (default: no clipping). */
  readonly maxGradNorm?: number
}

/**
 * The moments (`m.NAME`, `v.NAME`) and the step: copies on the host (`exportState`, a
 * checkpoint's) or tensors on the backend (`snapshot`, a rollback point's).
 */
export interface OptimizerState<T extends Float32Array | tf.Tensor = Float32Array> {
  readonly step: number
  readonly tensors: Readonly<Record<string, T>>
}

export interface UpdateStats {
  /** Global gradient norm before clipping. */
  readonly gradNorm: number
  readonly clipped: boolean
  readonly lr: number
  /** Optimizer steps taken so far (after this one). */
  readonly step: number
}

export class AdamW {
  /** Updates applied so far. */
  step = 0
  private readonly m: Map<string, tf.Variable>
  private readonly v: Map<string, tf.Variable>
  private readonly beta1: number
  private readonly beta2: number
  private readonly eps: number
  private readonly weightDecay: number
  private readonly lr: Schedule

  /** `params`: the variables to update, by name (e.g. `model.params`). */
  constructor(
    readonly params: ReadonlyMap<string, tf.Variable>,
    readonly options: AdamWOptions
  ) {
    this.beta1 = options.beta1 ?? 0.9
    this.beta2 = options.beta2 ?? 0.999
    this.eps = options.eps ?? 1e-8
    this.weightDecay = options.weightDecay ?? 0
    const lr = options.lr
    this.lr = typeof lr === "number" ? () => lr : lr
    const zeros = () =>
      new Map(
        [...params].map(([name, p]) => {
          const z = tf.zerosLike(p)
          const variable = tf.variable(z, false)
          z.dispose()
          return [name, variable] as const
        })
      )
    this.m = zeros()
    this.v = zeros()
  }

  /** Global L2 norm of a set of gradients (read asynchronously: see train/step.ts). */
  static async globalNorm(grads: ReadonlyMap<string, tf.Tensor>): Promise<number> {
    const sq = tf.tidy(() => addMany([...grads.values()].map((g) => tf.sum(tf.square(g)))))
    try {
      return Math.sqrt((await sq.data())[0]!)
    } finally {
      sq.dispose()
    }
  }

  /** Applies one update from `grads` (by parameter name; every parameter needs one). */
  async apply(grads: ReadonlyMap<string, tf.Tensor>): Promise<UpdateStats> {
    for (const name of this.params.keys()) if (!grads.has(name)) throw new OptimizerError({ message: `no gradient for ${name}` })
    const gradNorm = await AdamW.globalNorm(grads)
    if (!Number.isFinite(gradNorm)) throw new OptimizerError({ message: `gradient norm is ${gradNorm}; update skipped` })
    const max = this.options.maxGradNorm
    const clipped = max !== undefined && gradNorm > max
    const scale = clipped ? max / (gradNorm + 1e-6) : 1
    const lr = this.lr(this.step)
    this.step++
    const c1 = 1 - Math.pow(this.beta1, this.step)
    const c2 = 1 - Math.pow(this.beta2, this.step)
    for (const [name, p] of this.params) {
      tf.tidy(() => {
        const g = scale === 1 ? grads.get(name)! : tf.mul(grads.get(name)!, scale)
        const m = this.m.get(name)!
        const v = this.v.get(name)!
        const m1 = tf.add(tf.mul(m, this.beta1), tf.mul(g, 1 - this.beta1))
        const v1 = tf.add(tf.mul(v, this.beta2), tf.mul(tf.square(g), 1 - this.beta2))
        m.assign(m1)
        v.assign(v1)
        const update = tf.div(tf.mul(m1, lr / c1), tf.add(tf.sqrt(tf.div(v1, c2)), this.eps))
        const decay = this.weightDecay > 0 && p.rank >= 2 ? tf.mul(p, lr * this.weightDecay) : undefined
        p.assign(tf.sub(p, decay === undefined ? update : tf.add(update, decay)))
      })
    }
    return { gradNorm, clipped, lr, step: this.step }
  }

  /**
   * The moments (`m.NAME`, `v.NAME`) and the step, for a checkpoint. Read asynchronously, so on
   * every backend (WebGPU in Node cannot read a tensor synchronously).
   */
  async exportState(): Promise<OptimizerState> {
    const step = this.step
    const tensors: Record<string, Float32Array> = {}
    for (const [prefix, moments] of [["m", this.m], ["v", this.v]] as const) {
      for (const [name, t] of moments) tensors[`${prefix}.${name}`] = new Float32Array((await t.data()) as Float32Array)
    }
    return { step, tensors }
  }

  /**
   * The moments and the step, kept on the backend: each moment's tensor shares its variable's
   * memory (`tf.clone` copies nothing), and keeps the values it had, since an update assigns new
   * tensors to the variables. The caller disposes them.
   */
  snapshot(): OptimizerState<tf.Tensor> {
    const tensors: Record<string, tf.Tensor> = {}
    for (const [prefix, moments] of [["m", this.m], ["v", this.v]] as const) {
      for (const [name, t] of moments) tensors[`${prefix}.${name}`] = tf.clone(t)
    }
    return { step: this.step, tensors }
  }

  /**
   * Restores `exportState` or `snapshot` output (a snapshot's tensors stay the caller's to
   * dispose); checks every moment first, so it is all or nothing.
   */
  importState(state: OptimizerState<Float32Array | tf.Tensor>): void {
    for (const [name, p] of this.params) {
      for (const k of [`m.${name}`, `v.${name}`]) {
        const t = state.tensors[k]
        const fits = t instanceof tf.Tensor ? t.dtype === "float32" && t.shape.join(",") === p.shape.join(",") : t?.length === p.size
        if (!fits) {
          throw new OptimizerError({ message: `optimizer state ${k} is missing or has the wrong size` })
        }
      }
    }
    for (const [name, p] of this.params) {
      for (const [k, store] of [[`m.${name}`, this.m], [`v.${name}`, this.v]] as const) {
        const value = state.tensors[k]!
        if (value instanceof tf.Tensor) store.get(name)!.assign(value)
        else {
          const t = upload(value, p.shape)
          store.get(name)!.assign(t)
          t.dispose()
        }
      }
    }
    this.step = state.step
  }

  dispose(): void {
    for (const t of [...this.m.values(), ...this.v.values()]) t.dispose()
  }
}

/** Inputs of one `addN` at most (see `addMany`). */
const ADD_N_INPUTS = 7

/**
 * The sum of many tensors of one shape. One `addN` per at most 7 inputs: on WebGPU an op binds each
 * input as a storage buffer, and a shader stage may have only 8 (Dawn's default limit, the output
 * included). A larger `addN` there makes an invalid pipeline, which computes nothing and raises no
 * error (seen on an H200: the global gradient norm over 311 gradients).
 */
export const addMany = (parts: ReadonlyArray<tf.Tensor>): tf.Tensor => {
  if (parts.length === 0) throw new RangeError("addMany needs at least one tensor")
  let level = [...parts]
  while (level.length > 1) {
    const next: Array<tf.Tensor> = []
    for (let i = 0; i < level.length; i += ADD_N_INPUTS) {
      const group = level.slice(i, i + ADD_N_INPUTS)
      next.push(group.length === 1 ? group[0]! : tf.addN(group))
    }
    level = next
  }
  return level[0]!
}
