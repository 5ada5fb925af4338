/**
 * transposeInto (model/transpose.ts), which the checkpoint loader, the in-place backward products
 * and attention use: held to the definition out[j·stride + offset + i] = src[i·c + j], whole and
 * in row chunks of a taller matrix (as the loader writes it), with column counts that are and are
 * not multiples of its 8-row strips.
 */
import { transpose, transposeInto } from "@reins/policy"
import { describe, expect, it } from "vitest"

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
