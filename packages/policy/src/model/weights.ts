/**
 * A model's weights as plain arrays, by our parameter names (config.ts `parameterShapes`):
 * checked against a config before any is used, and initialised from a seed.
 */
import { Rng } from "../random.js"
import { type ModelConfig, parameterShapes } from "./config.js"

export type Weights = Record<string, Float32Array>

export class WeightsError extends Error {
  override readonly name = "WeightsError"
}

/** Throws a WeightsError unless `weights` has exactly the expected names and sizes. */
export const checkWeights = (shapes: Record<string, ReadonlyArray<number>>, weights: Weights): void => {
  for (const [name, shape] of Object.entries(shapes)) {
    const w = weights[name]
    const size = shape.reduce((a, b) => a * b, 1)
    if (w === undefined) throw new WeightsError(`missing parameter ${name} [${shape.join(", ")}]`)
    if (w.length !== size) throw new WeightsError(`parameter ${name} has ${w.length} values, expected [${shape.join(", ")}] = ${size}`)
  }
  for (const name of Object.keys(weights)) if (!(name in shapes)) throw new WeightsError(`unexpected parameter ${name}`)
}

/**
 * GPT-2 style initialisation: N(0, 0.02) for embeddings and matrices, the residual projections
 * (attn.wo, mlp.w2) scaled by 1/√(2·layers), norm scales 1, biases 0.
 */
export const initWeights = (config: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const residualStd = 0.02 / Math.sqrt(2 * config.nLayers)
  const out: Weights = {}
  for (const [name, shape] of Object.entries(parameterShapes(config))) {
    const w = new Float32Array(shape.reduce((a, b) => a * b, 1))
    if (name.endsWith("norm.weight")) w.fill(1)
    else if (!/\.attn\.b[qkvo]$/.test(name)) {
      const std = name.endsWith("attn.wo") || name.endsWith("mlp.w2") ? residualStd : 0.02
      for (let i = 0; i < w.length; i++) w[i] = std * rng.normal()
    }
    out[name] = w
  }
  return out
}
