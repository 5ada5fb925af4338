/**
 * What a model costs, for the benches that compare a measured rate with this machine's bound:
 * the bytes one decoded token reads, the FLOPs of prefill and of a LoRA training step, and
 * random weights in a real model's shapes, made fast.
 */
import { forwardFlops, LoraConfig, loraSites, type ModelConfig, parameterCount, parameterShapes, Rng, type Weights } from "@reins/policy"

/** The adapters the benches train: rank 8 on all seven projections. */
export const LORA = new LoraConfig({ rank: 8, alpha: 16, targets: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] })

/** F32 bytes of the weights one decoded token reads: all of them but the embedding rows it does not look up (with an untied head). */
export const weightBytes = (c: ModelConfig) => 4 * (parameterCount(c) - (c.tieEmbeddings ? 0 : c.vocabSize * c.dModel))
/** F32 bytes of one sequence's KV cache at `ctx` tokens. */
export const kvBytes = (c: ModelConfig, ctx: number) => 4 * 2 * c.nLayers * c.kvDim * ctx
/** Decode tok/s that `gbps` allows for `batch` sequences at context `ctx` (one read of the weights per step). */
export const bandwidthBound = (c: ModelConfig, gbps: number, batch: number, ctx: number) => (batch * gbps * 1e9) / (weightBytes(c) + batch * kvBytes(c, ctx))

/**
 * FLOPs of a LoRA training step, counting what it needs with the base weights frozen: the
 * forward pass; the input gradient of every dense product and of the head (as much again — no
 * weight gradient is computed for a frozen weight); attention's backward (four products to the
 * forward's two: one forward's attention more); the adapters' forward and their two gradients
 * (3 × their forward FLOPs).
 */
export const loraTrainFlops = (c: ModelConfig, tokens: number, seqLen: number) => {
  const attention = 2 * tokens * c.nLayers * 2 * seqLen * c.qDim
  const adapters = 2 * tokens * loraSites(c, LORA).reduce((n, site) => n + LORA.rank * (site.rows + site.cols), 0)
  return 2 * forwardFlops(c, tokens, seqLen) + attention + 3 * adapters
}

/** Prefill FLOPs as the engine computes them: causal attention (mean (P+1)/2 keys), the head over the last row. */
export const prefillFlops = (c: ModelConfig, p: number) => forwardFlops(c, p, (p + 1) / 2) - 2 * (p - 1) * c.dModel * c.vocabSize

/**
 * Random weights, fast (values do not change the speed of any of this): N(0, 0.02) values copied
 * from one pool of 2^20 at a random offset per tensor, norms 1. Filling them is then as fast as
 * this machine touches fresh memory, where `initWeights` draws every value (a minute for 0.6B).
 */
export const benchWeights = (c: ModelConfig, seed: number): Weights => {
  const rng = new Rng(seed)
  const pool = Float32Array.from({ length: 2 ** 20 }, () => 0.02 * rng.normal())
  const out: Weights = {}
  for (const [name, shape] of Object.entries(parameterShapes(c))) {
    const w = new Float32Array(shape.reduce((a, b) => a * b, 1))
    if (name.endsWith("norm.weight")) w.fill(1)
    else {
      let from = rng.nextUint32() % pool.length
      for (let at = 0; at < w.length; from = 0) {
        const n = Math.min(pool.length - from, w.length - at)
        w.set(pool.subarray(from, from + n), at)
        at += n
      }
    }
    out[name] = w
  }
  return out
}

/** FLOPs of a full training step: the forward pass and twice as much again for the gradients of inputs and weights. */
export const fullTrainFlops = (c: ModelConfig, tokens: number, seqLen: number) => 3 * forwardFlops(c, tokens, seqLen)
