/**
 * transposeInto (model/transpose.ts), which the checkpoint loader, the in-place backward products
 * and attention use: held to the definition out[j·stride + offset + i] = src[i·c + j], whole and
 * in row chunks of a taller matrix (as the loader writes it), with column counts that are and are
 * not multiples of its 8-row strips.
 */
import { HeapTransposer, transpose, transposeInto } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { backend } from "./model-fixtures.js"

const matrix = (r: number, c: number) => Float32Array.from({ length: r * c }, (_, k) => k + 1)

const reference = (src: Float32Array, r: number, c: number): Float32Array => {
  const out = new Float32Array(r * c)
  for (let i = 0; i < r; i++) for (let j = 0; j < c; j++) out[j * r + i] = src[i * c + j]!
  return out
}

const SHAPES: ReadonlyArray<[number, number]> = [[1, 1], [1, 9], [9, 1], [3, 8], [8, 3], [13, 7], [7, 13], [16, 24], [33, 65], [64, 1024]]

describe("transposeInto", () => {
  it.each(SHAPES)("transposes a [%i, %i] matrix whole", (r, c) => {
    const src = matrix(r, c)
    expect(transpose(src, r, c)).toEqual(reference(src, r, c))
  })

  it.each(SHAPES)("writes a [%i, %i] matrix's transpose from row chunks of 1, 2 and 5 rows", (r, c) => {
    const src = matrix(r, c)
    const want = reference(src, r, c)
    for (const rows of [1, 2, 5]) {
      const out = new Float32Array(r * c).fill(-1)
      for (let first = 0; first < r; first += rows) {
        const n = Math.min(rows, r - first)
        transposeInto(src.subarray(first * c, (first + n) * c), out, n, c, r, first)
      }
      expect(out).toEqual(want)
    }
  })

  it("leaves the rest of a larger output untouched", () => {
    const out = new Float32Array(4 * 10).fill(-1)
    transposeInto(matrix(3, 10), out, 3, 10, 4, 1)
    for (let j = 0; j < 10; j++) expect(out[j * 4]).toBe(-1)
    expect(out[1]).toBe(1)
    expect(out[9 * 4 + 3]).toBe(30)
  })
})

/**
 * The loader's transpose into the wasm heap (model/transposeKernel.ts): the SIMD kernel's 4×8
 * blocks and the JS loop for the rows and columns past them, held to the same definition, whole
 * and in row chunks, with nothing written outside the destination.
 */
describe("HeapTransposer", () => {
  let transposer: HeapTransposer
  beforeAll(async () => {
    await backend()
    transposer = new HeapTransposer()
  })
  afterAll(() => transposer.dispose())

  it("runs its kernel here (the suite runs on wasm with SIMD; elsewhere the cases below would test the JS loop)", () => {
    expect(tf.getBackend()).toBe("wasm")
    expect(HeapTransposer.available).toBe(true)
  })

  it.each([...SHAPES, [4, 8], [12, 40], [37, 129]] as Array<[number, number]>)("transposes a [%i, %i] matrix into a tensor, whole and from row chunks of 1, 4, 5 and 8 rows", (r, c) => {
    const src = matrix(r, c)
    const want = reference(src, r, c)
    for (const rows of [r, 1, 4, 5, 8]) {
      const out = tf.fill([c, r], -1)
      for (let first = 0; first < r; first += rows) {
        const n = Math.min(rows, r - first)
        transposer.into(src.subarray(first * c, (first + n) * c), out, n, c, r, first)
      }
      expect(Float32Array.from(out.dataSync())).toEqual(want)
      out.dispose()
    }
  })

  it("writes nothing outside the destination, keeps one scratch tensor across calls, and refuses a destination too small", () => {
    const before = tf.memory().numTensors
    const own = new HeapTransposer()
    const [r, c] = [13, 24]
    const below = tf.fill([64], 7)
    const out = tf.fill([c, r + 3], -1) // rows of r + 3: the transpose fills columns 2 .. 2 + r of each
    const above = tf.fill([64], 7)
    own.into(matrix(r, c), out, r, c, r + 3, 2)
    const got = out.dataSync()
    for (let j = 0; j < c; j++) {
      expect(got[j * (r + 3)]).toBe(-1)
      expect(got[j * (r + 3) + 1]).toBe(-1)
      expect(got[j * (r + 3) + r + 2]).toBe(-1)
      for (let i = 0; i < r; i++) expect(got[j * (r + 3) + 2 + i]).toBe(i * c + j + 1)
    }
    expect(Array.from(below.dataSync()).every((v) => v === 7) && Array.from(above.dataSync()).every((v) => v === 7)).toBe(true)
    own.into(matrix(2, 8), out, 2, 8, r + 3, 0) // smaller: the same scratch
    expect(tf.memory().numTensors).toBe(before + 4) // below, out, above and the scratch
    expect(() => own.into(matrix(r, c), out, r, c, r + 3, 4)).toThrow(/does not fit a tensor of 384/)
    expect(() => own.into(matrix(r, c), out, r, c + 1, r + 3, 0)).toThrow(/does not fit/)
    own.dispose()
    own.dispose() // twice: nothing left to free
    expect(tf.memory().numTensors).toBe(before + 3)
    tf.dispose([below, out, above])
  })
})
