/**
 * Rollback points: what a Train (or a Restore) changes — every weight or only the LoRA adapters,
 * and the optimizer's moments and step — kept so that a failed one puts them back.
 *
 * A point kept on the device holds the tensors the variables have now: an update assigns new
 * tensors to them, so these keep their values, and nothing is copied — where a copy on the host
 * reads every weight and both moments back before each update (~7 GB from a GPU for Qwen3-0.6B
 * trained whole; 0.2 s on wasm for 23M parameters: `npm run bench -- rollback`). The values an
 * update replaces then stay in the device's memory until it ends, which the micro-batch budget
 * counts (model/memory.ts `rollbackBytes`). Where that memory would not hold them beside the
 * update's micro-batch (`rollbackFitsOnDevice`: a model trained whole that nearly fills wasm's
 * 4 GiB heap), the point is copied to the host instead.
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

/** On the device (tensors shared, no copy), or copied to the host (where the device's memory would not hold them). */
export type RollbackWhere = "device" | "host"

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
