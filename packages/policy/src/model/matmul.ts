/**
 * The dense products of the training pass, each with a hand-written gradient made only of
 * untransposed rank-2 matmuls: on the wasm backend XNNPACK's fast matmul is used for `a·b`
 * without transpose flags alone (with `transposeB` the same product runs ~10x slower), so every
 * gradient transposes explicitly (`transpose2d`, a JS copy 3x faster than tfjs's kernel there).
 *
 * Which gradients a product needs depends on what is trained, and tfjs cannot tell a custom
 * gradient: `customGrad` computes every input's gradient whether or not it is used. So there is
 * one op per case:
 *
 *   matmul        x·W, W trained: dx = dy·Wᵀ and dW = xᵀ·dy
 *   frozenMatmul  x·W, W frozen (LoRA's base weights): dx only, so the backward pass costs one
 *                 forward, not two; W is an input of the op no more, so no gradient reaches it
 *   loraLinear    x·W + scale·(x'·A)·B, W frozen, A and B trained (x' is x, or x with LoRA's
 *                 dropout): one op, so the pass keeps one output and one gradient per adapted
 *                 layer instead of five (tfjs holds every op's output and gradient until the
 *                 whole backward pass is done, which bounds the micro-batch the heap holds)
 *   tiedHead      h·Eᵀ for a head tied to the embedding E [vocab, d], E trained: the forward
 *                 uses Eᵀ (transposed once per change of E, see Transformer), dh = dy·E needs
 *                 no transpose, dE = (hᵀ·dy)ᵀ
 *
 * The frozen products take their `Products`: tfjs's matmul, or on wasm for a model whose packed
 * copies would not fit the heap, products in place (gemmKernel.ts) over matrices held [out, in]
 * as Hugging Face stores them (no packed copy of any weight, and `dy·Wᵀ` needs no transpose).
 */
import * as tf from "@tensorflow/tfjs"
import { heapGemm, heapGemmNt } from "./gemmKernel.js"
import { backward, isWasm, view } from "./heap.js"
import { transposeInto } from "./transpose.js"

/**
 * `xᵀ` of a rank-2 tensor; on wasm a JS copy straight into the new tensor's memory (no
 * intermediate array: the transposed head is 28M floats for a 49k vocabulary).
 */
export const transpose2d = (x: tf.Tensor2D): tf.Tensor2D => {
  if (!isWasm()) return tf.transpose(x)
  const [r, c] = x.shape
  const out = tf.fill([c, r], 0) as tf.Tensor2D
  // Both views after the allocation: a view does not outlive one.
  transposeInto(view(x), view(out), r, c)
  return out
}

/** `a·bᵀ` as an untransposed product (the transpose is dropped right after). */
const timesTransposed = (a: tf.Tensor2D, b: tf.Tensor2D): tf.Tensor2D => {
  const bt = transpose2d(b)
  const out = tf.matMul(a, bt) as tf.Tensor2D
  bt.dispose()
  return out
}

/** `aᵀ·b` as an untransposed product (the transpose is dropped right after). */
const transposedTimes = (a: tf.Tensor2D, b: tf.Tensor2D): tf.Tensor2D => {
  const at = transpose2d(a)
  const out = tf.matMul(at, b) as tf.Tensor2D
  at.dispose()
  return out
}

/** How a frozen weight is multiplied: `x·W`, and `x·Wᵀ`, for W as the products hold it. */
export interface Products {
  readonly times: (x: tf.Tensor2D, w: tf.Tensor2D) => tf.Tensor2D
  readonly timesTransposed: (x: tf.Tensor2D, w: tf.Tensor2D) => tf.Tensor2D
}

/** tfjs's matmul (on wasm XNNPACK, which caches a packed copy of every right-hand matrix). */
export const tfjsProducts: Products = { times: (x, w) => tf.matMul(x, w), timesTransposed }

/** In place on the wasm heap (gemmKernel.ts), for W held [out, in]: `x·W` is x times its rows, `x·Wᵀ` x times it as held. */
export const heapProducts: Products = { times: heapGemmNt, timesTransposed: heapGemm }

/** `a·b` for rank-2 tensors, both trained (or feeding something trained). */
export const matmul: (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D = tf.customGrad(
  // @ts-expect-error tfjs types customGrad's callback with a rest parameter list
  (a: tf.Tensor2D, b: tf.Tensor2D, save: tf.GradSaveFunc) => {
    save([a, b])
    return {
      value: tf.matMul(a, b),
      gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) =>
        backward(dy, saved, () => {
          const [sa, sb] = saved as [tf.Tensor2D, tf.Tensor2D]
          return [timesTransposed(dy, sb), transposedTimes(sa, dy)]
        })
    }
  }
) as never

/**
 * `x·W` with W frozen, `w` as `products` hold it: the gradient reaches x alone. `wT`, when the
 * caller keeps it, is Wᵀ in the same form (else the backward pass runs `timesTransposed`).
 */
export const frozenMatmul = (x: tf.Tensor2D, w: tf.Tensor2D, wT?: tf.Tensor2D, products: Products = tfjsProducts): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (x: tf.Tensor2D) => ({
        value: products.times(x, w),
        gradFunc: (dy: tf.Tensor2D) =>
          backward(dy, [], () => [wT !== undefined ? products.times(dy, wT) : products.timesTransposed(dy, w)])
      })
    ) as (x: tf.Tensor2D) => tf.Tensor2D
  )(x)

/** `x·w + scale·(xd·a)·b` with `w` frozen (see the module comment); gradients reach x, xd, a and b. */
export const loraLinear = (
  x: tf.Tensor2D,
  xd: tf.Tensor2D,
  w: tf.Tensor2D,
  a: tf.Tensor2D,
  b: tf.Tensor2D,
  scale: number,
  products: Products = tfjsProducts
): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (x: tf.Tensor2D, xd: tf.Tensor2D, a: tf.Tensor2D, b: tf.Tensor2D, save: tf.GradSaveFunc) => {
        const xa = tf.mul(tf.matMul(xd, a), scale) as tf.Tensor2D // [N, rank]
        save([xd, a, b, xa])
        return {
          value: tf.add(products.times(x, w), tf.matMul(xa, b)),
          gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) =>
            backward(dy, saved, () => {
              const [sxd, sa, sb, sxa] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.Tensor2D]
              const dxa = tf.mul(timesTransposed(dy, sb), scale) as tf.Tensor2D // d(xd·a)
              return [products.timesTransposed(dy, w), timesTransposed(dxa, sa), transposedTimes(sxd, dxa), transposedTimes(sxa, dy)]
            })
        }
      }
    ) as (x: tf.Tensor2D, xd: tf.Tensor2D, a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D
  )(x, xd, a, b)

/** `h·Eᵀ` for a trained embedding E [vocab, d], given `eT` = Eᵀ [d, vocab] (see the module comment). */
export const tiedHead = (h: tf.Tensor2D, e: tf.Tensor2D, eT: tf.Tensor2D): tf.Tensor2D =>
  (
    tf.customGrad(
      // @ts-expect-error see matmul
      (h: tf.Tensor2D, e: tf.Tensor2D, save: tf.GradSaveFunc) => {
        save([h, e])
        return {
          value: tf.matMul(h, eT),
          gradFunc: (dy: tf.Tensor2D, saved: Array<tf.Tensor>) =>
            backward(dy, saved, () => {
              const [sh, se] = saved as [tf.Tensor2D, tf.Tensor2D]
              const deT = transposedTimes(sh, dy) // [d, vocab]
              const de = transpose2d(deT)
              deT.dispose()
              return [tf.matMul(dy, se), de]
            })
        }
      }
    ) as (h: tf.Tensor2D, e: tf.Tensor2D) => tf.Tensor2D
  )(h, e)
