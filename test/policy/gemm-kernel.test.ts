/**
 * The in-place product (gemmKernel.ts) on the wasm backend: held to tfjs's own matmul over
 * shapes that reach every path (4-row tiles, left-over rows, a shared dimension across several
 * blocks, columns beyond the last 8-column panel; matrices side by side in one output), its
 * form over a matrix stored [out, in] (`heapGemmNtInto`: tiles, row and shared-dimension blocks,
 * single rows) likewise, and the fast decoder with `gemm: "heap"` held to the same decoder with
 * tfjs's matmul, on the Llama family's variants.
 */
import { DecodeWeights, heapGemm, heapGemmAvailable, heapGemmInto, heapGemmNt, heapGemmNtInto, Transformer } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { beforeAll, describe, expect, it } from "vitest"
import { backend, prefillThenStep, tinyConfig, variantConfig } from "./model-fixtures.js"

let wasm = false
beforeAll(async () => {
  wasm = (await backend()) === "wasm"
})

const worstRelative = (got: tf.Tensor, want: tf.Tensor): number => {
  const g = got.dataSync(), w = want.dataSync()
  let scale = 0
  for (const v of w) scale = Math.max(scale, Math.abs(v))
  let worst = 0
  for (let i = 0; i < w.length; i++) worst = Math.max(worst, Math.abs(g[i]! - w[i]!))
  return worst / scale
}

describe("heapGemm", () => {
  it("is available on the wasm backend", () => {
    expect(wasm).toBe(true) // the suite runs on wasm; were it not, the cases below would prove nothing
    expect(heapGemmAvailable()).toBe(true)
  })

  it.each([
    [1, 3, 5], // one row: a 4-float group and a column past it; 3 rows of W, fewer than a group of 8
    [1, 64, 16], // one row (decoding one sequence): 8 whole groups of W's rows
    [1, 13, 8200], // one row across three column blocks of 4,096; a group of W's rows and 5 more
    [3, 5, 3], // no 4-float group: the JS loop alone
    [4, 8, 8],
    [7, 300, 21], // 4-row tiles + 3 single rows, two shared-dimension blocks, 5 columns past the panels
    [9, 513, 64], // three blocks, the last of one row
    [16, 1024, 40]
  ])("x[%i, %i]·W[.., %i] matches tf.matMul", (rows, k, cols) => {
    const x = tf.randomNormal([rows, k], 0, 1, "float32", rows * 7 + k) as tf.Tensor2D
    const w = tf.randomNormal([k, cols], 0, 1, "float32", cols * 11 + k) as tf.Tensor2D
    const want = tf.matMul(x, w)
    const got = heapGemm(x, w)
    expect(got.shape).toEqual([rows, cols])
    expect(worstRelative(got, want)).toBeLessThan(1e-5)
    // w is left as it was, and a second product over the same memory gives the same values.
    const again = heapGemm(x, w)
    expect(Array.from(again.dataSync())).toEqual(Array.from(got.dataSync()))
    tf.dispose([x, w, want, got, again])
  })

  it("overwrites a kept output (no stale values), and refuses shapes that do not multiply, naming them", () => {
    const x = tf.randomNormal([1, 24], 0, 1, "float32", 3) as tf.Tensor2D
    const w = tf.randomNormal([24, 12], 0, 1, "float32", 4) as tf.Tensor2D
    const out = tf.fill([1, 12], 1e6) as tf.Tensor2D
    heapGemmInto(x, w, out)
    const want = tf.matMul(x, w)
    expect(worstRelative(out, want)).toBeLessThan(1e-5)
    const a = tf.zeros([2, 3]) as tf.Tensor2D
    const b = tf.zeros([4, 8]) as tf.Tensor2D
    expect(() => heapGemm(a, b)).toThrow(/shapes \[2,3\] and \[4,8\] do not multiply/)
    expect(() => heapGemmInto(x, w, a)).toThrow(/do not multiply into \[2,3\]/)
    tf.dispose([x, w, out, want, a, b])
  })
})

describe("heapGemmInto at a column", () => {
  it.each([1, 6])("%i row(s): q, k and v side by side in one output, each from its own matrix", (rows) => {
    const x = tf.randomNormal([rows, 40], 0, 1, "float32", 5) as tf.Tensor2D
    const parts = [24, 13, 8].map((cols, i) => tf.randomNormal([40, cols], 0, 1, "float32", 20 + i) as tf.Tensor2D)
    const out = tf.fill([rows, 45], 1e6) as tf.Tensor2D
    let column = 0
    for (const w of parts) {
      heapGemmInto(x, w, out, column)
      column += w.shape[1]
    }
    const want = tf.concat(parts.map((w) => tf.matMul(x, w)), 1)
    expect(worstRelative(out, want)).toBeLessThan(1e-5)
    // Past the output's width: refused, naming the column.
    expect(() => heapGemmInto(x, parts[0]!, out, 30)).toThrow(/do not multiply into \[\d,45\] at column 30/)
    tf.dispose([x, ...parts, out, want])
  })
})

describe("heapGemmNtInto: x·wᵀ over w stored [out, in]", () => {
  it.each([
    [1, 64, 5], // one row (decoding one sequence): dot_rows, four whole passes of four vectors per row of w
    [1, 52, 9], // 3 passes and a vector left over
    [3, 8, 4], // rows of x too few for a tile, each its own pass over w
    [2, 6, 3], // a shared dimension of no whole vectors: the JS loop
    [4, 8, 2], // one tile of 4 rows by 2 of w
    [7, 12, 5], // a tile and 3 single rows; a last row of w past the pairs
    [70, 600, 10], // two blocks of rows (64 + 4, then 2 single rows), two blocks of the shared dimension
    [130, 1040, 33] // three row blocks, three blocks of the shared dimension, an odd count of w's rows
  ])("x[%i, %i]·w[%i, ..]ᵀ matches tf.matMul, and overwrites a kept output", (rows, k, cols) => {
    const x = tf.randomNormal([rows, k], 0, 1, "float32", rows * 5 + k) as tf.Tensor2D
    const w = tf.randomNormal([cols, k], 0, 1, "float32", cols * 13 + k) as tf.Tensor2D
    const out = tf.fill([rows, cols], 1e6) as tf.Tensor2D
    heapGemmNtInto(x, w, out)
    const want = tf.matMul(x, w, false, true)
    expect(worstRelative(out, want)).toBeLessThan(1e-5)
    const fresh = heapGemmNt(x, w)
    expect(Array.from(fresh.dataSync())).toEqual(Array.from(out.dataSync()))
    tf.dispose([x, w, out, want, fresh])
  })

  it.each([1, 6])("%i row(s): writes at a column of a wider output, and refuses shapes that do not multiply, naming them", (rows) => {
    const x = tf.randomNormal([rows, 16], 0, 1, "float32", 8) as tf.Tensor2D
    const w = tf.randomNormal([6, 16], 0, 1, "float32", 9) as tf.Tensor2D
    const out = tf.fill([rows, 10], 7) as tf.Tensor2D
    heapGemmNtInto(x, w, out, 3)
    const values = Array.from(out.dataSync())
    const want = Array.from(tf.matMul(x, w, false, true).dataSync())
    for (let i = 0; i < rows; i++) {
      const row = values.slice(i * 10, i * 10 + 10)
      expect([...row.slice(0, 3), row[9]]).toEqual([7, 7, 7, 7]) // the rest of out left as it was
      row.slice(3, 9).forEach((v, j) => expect(Math.abs(v - want[i * 6 + j]!)).toBeLessThan(1e-4))
    }
    const narrow = tf.zeros([6, 15]) as tf.Tensor2D
    expect(() => heapGemmNtInto(x, narrow, out)).toThrow(/heapGemmNt: shapes \[\d,16\] and \[6,15\] do not multiply/)
    expect(() => heapGemmNtInto(x, w, out, 5)).toThrow(/do not multiply into \[\d,10\] at column 5/)
    tf.dispose([x, w, out, narrow])
  })
})

describe("the fast decoder with in-place products", () => {
  it.each([
    ["tiny (tied head)", tinyConfig(61)],
    ["variants (GQA, biases, q/k norms, untied head)", variantConfig(61)]
  ])("%s: prefill and decode logits match tfjs's matmul", (_name, config) => {
    const model = Transformer.init(config, 5)
    const ids = Int32Array.from({ length: 11 }, (_, i) => (i * 13 + 3) % 61)
    const run = (gemm: "tfjs" | "heap") => {
      const weights = DecodeWeights.fromModel(model, { gemm })
      expect(weights.gemm).toBe(gemm)
      return prefillThenStep(weights, ids) // a 10-token prefill (4-row tiles and left-over rows), then the 1-row kernel
    }
    const want = run("tfjs")
    const got = run("heap")
    expect(got.length).toBe(want.length)
    let worst = 0
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!))
    expect(worst).toBeLessThan(1e-5)
    model.dispose()
  })
})
