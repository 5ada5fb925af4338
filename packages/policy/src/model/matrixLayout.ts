/**
 * How a model holds its linear layers' matrices, and why: tfjs's matmul (on wasm XNNPACK, whose
 * fast path takes no transpose flag) multiplies `x·W` with W [in, out]; the in-place products of
 * gemmKernel.ts, used where XNNPACK's packed copies would not fit the heap, read W [out, in] as
 * Hugging Face stores it (a row of W per output: one row's product streams faster, a tied head is
 * the embedding table itself, and the loader copies the file's matrices without a transpose).
 * Weights outside the model (`Weights`, checkpoints, the wire) are [in, out] whatever the layout.
 */
import { type ModelConfig, parameterShapes } from "./config.js"
import { multipliesInPlace } from "./gemmKernel.js"
import { transpose } from "./transpose.js"

/** [in, out] (`x·W`, for tfjs's matmul) or [out, in] (Hugging Face's, for the in-place products). */
export type MatrixLayout = "inOut" | "outIn"

/** Whether a parameter of this name and shape is a linear layer's matrix: every rank-2 parameter but the embedding table. */
export const isLinearMatrix = (name: string, shape: ReadonlyArray<number>): boolean => shape.length === 2 && name !== "tok_embeddings.weight"

/** `parameterShapes` as held in `layout`: with "outIn" each linear layer's matrix is [out, in]. */
export const storedShapes = (c: ModelConfig, layout: MatrixLayout): Record<string, ReadonlyArray<number>> => {
  const shapes = parameterShapes(c)
  return layout === "inOut" ? shapes : Object.fromEntries(Object.entries(shapes).map(([name, s]) => [name, storedShape(name, s, layout)]))
}

/**
 * How a model's frozen base weights are multiplied: tfjs's matmul, or in place on the wasm heap
 * (gemmKernel.ts), where the matrices are held [out, in] (`layoutOf`).
 */
export type ProductsKind = "tfjs" | "heap"

export const layoutOf = (products: ProductsKind): MatrixLayout => (products === "heap" ? "outIn" : "inOut")

/**
 * How `config`'s model multiplies here: in place (gemmKernel.ts) on wasm where XNNPACK's packed
 * copies would not fit, else tfjs's matmul. (In place for every model that trains LoRA alone was
 * tried: SmolLM2-135M then loaded faster, 0.54–0.58 s against 0.80–0.87, but through the engine,
 * alternating in one process, decoded 16 sequences at 57–63 tok/s against 62–74, one at 31–33
 * against 33–35.)
 */
export const defaultProducts = (config: ModelConfig): ProductsKind => (multipliesInPlace(config) ? "heap" : "tfjs")

/** A parameter's shape as held in `layout`. */
export const storedShape = (name: string, shape: ReadonlyArray<number>, layout: MatrixLayout): ReadonlyArray<number> =>
  layout === "outIn" && isLinearMatrix(name, shape) ? [shape[1]!, shape[0]!] : shape

/** A parameter's values ([in, out]) as held in `layout`. */
export const toLayout = (name: string, shape: ReadonlyArray<number>, values: Float32Array, layout: MatrixLayout): Float32Array =>
  layout === "outIn" && isLinearMatrix(name, shape) ? transpose(values, shape[0]!, shape[1]!) : values

/** A parameter's values as held in `layout`, back to [in, out] (`shape`). */
export const fromLayout = (name: string, shape: ReadonlyArray<number>, values: Float32Array, layout: MatrixLayout): Float32Array =>
  layout === "outIn" && isLinearMatrix(name, shape) ? transpose(values, shape[1]!, shape[0]!) : values
