/**
 * Rollback points: what a Train (or a Restore) changes — every weight or only the LoRA adapters,
 * and the optimizer's moments and step — kept so that a failed one puts them back.
 *
 * Where a point is kept depends on the backend. Off wasm (WebGPU, TensorFlow, the CPU backend) it
 * holds the tensors the variables have now: an update assigns new tensors to them, so these keep
 * their values, and nothing is copied — where a copy on the host would read every weight and both
 * moments back from a GPU before each update (~7 GB for Qwen3-0.6B trained whole). Kept, the
 * values an update replaces stay in the device's memory until it ends, which the micro-batch
 * budget counts (model/memory.ts `rollbackBytes`). On wasm the point is copied to JavaScript
 * memory instead: a model may fill the 4 GiB heap, which would not hold those values too.
 */
import * as tf from "@tensorflow/tfjs"
import type { Transformer } from "../model/transformer.js"
import type { DeviceOptimizer } from "./training.js"

export interface RollbackPoint {
  /** Puts the values back as they were when the point was taken. */
  readonly restore: () => void
  /** Lets the kept values go (after the change succeeded, or was rolled back). */
  readonly dispose: () => void
}

/** On the device (tensors shared, no copy), or copied to the host (wasm). */
export type RollbackWhere = "device" | "host"

/** Where a backend keeps its rollback points. */
export const rollbackWhere = (backend: string): RollbackWhere => (backend === "wasm" ? "host" : "device")

/** A point for the optimizer alone: its moments and step (none before its first update). */
export const optimizerRollback = async (optimizer: DeviceOptimizer, where: RollbackWhere): Promise<RollbackPoint> => {
  const adam = optimizer.current
  if (where === "host") {
    const state = await adam?.exportState()
    return { restore: () => optimizer.restore(state), dispose: () => {} }
  }
  const state = adam?.snapshot()
  return {
    restore: () => optimizer.restore(state),
    dispose: () => tf.dispose(Object.values(state?.tensors ?? {}))
  }
}

/** A point for what training changes: the trainable weights (every one, or the adapters) and the optimizer. */
export const trainingRollback = async (model: Transformer, optimizer: DeviceOptimizer, where: RollbackWhere): Promise<RollbackPoint> => {
  const adapters = model.lora !== undefined
  const weights = where === "device"
    ? new Map(Array.from(model.trainable, ([name, v]) => [name, tf.clone(v)] as const))
    : await (adapters ? model.readAdaptersAsync() : model.readWeightsAsync())
  const moments = await optimizerRollback(optimizer, where)
  return {
    restore: () => {
      if (weights instanceof Map) for (const [name, v] of model.trainable) v.assign(weights.get(name)!)
      else if (adapters) model.setAdapters(weights)
      else model.setWeights(weights)
      moments.restore()
    },
    dispose: () => {
      if (weights instanceof Map) tf.dispose([...weights.values()])
      moments.dispose()
    }
  }
}
