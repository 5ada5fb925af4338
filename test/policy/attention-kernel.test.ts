/**
 * The hand-assembled SIMD loops of attentionKernel.ts (`dot_rows`, which sums four vectors per
 * pass then the rest one by one, and `axpy_rows`, which adds eight rows per pass then the rest
 * one by one) held to float64 sums, as are the JS loops that replace them where wasm SIMD is
 * missing, over row counts on both sides of a group of eight and row lengths on both sides of
 * a pass of four vectors.
 */
import { describe, expect, it } from "vitest"
import { AttentionKernel } from "../../packages/policy/src/model/attentionKernel.js"

/** a (weights or a query), b [rows, stride] and out, filled from a seed; byte offsets, and how to free them. */
const fill = (kernel: AttentionKernel, rows: number, floats: number, stride: number, seed: number) => {
  const sizes = [rows + floats, Math.max(1, rows) * stride, rows + floats + 4]
  const [a, b, out] = sizes.map((n) => kernel.allocRegion(n)!) as [number, number, number]
  const m = kernel.f32()
  let s = seed
  const next = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1
  for (let i = 0; i < sizes[0]!; i++) m[(a >>> 2) + i] = next()
  for (let i = 0; i < sizes[1]!; i++) m[(b >>> 2) + i] = next()
  m.fill(1e6, out >>> 2, (out >>> 2) + sizes[2]!) // stale values the kernel must overwrite
  return { a, b, out, free: () => [a, b, out].forEach((o, i) => kernel.free(o, sizes[i]!)) }
}

describe("the attention kernel's SIMD loops", () => {
  const simd = new AttentionKernel()
  const js = new AttentionKernel({ simd: false })

  it("compiles here (the suite would otherwise check the JS loops against themselves)", () => {
    expect(simd.simd).toBe(true)
    expect(js.simd).toBe(false)
  })

  // rows: none, fewer than a group, one group, a group and some, several groups and some.
  it.each([0, 1, 7, 8, 9, 16, 23, 61])("axpy_rows and dot_rows over %i rows match float64 sums and the JS loops", (rows) => {
    const floats = 12, stride = 20 // len 12 floats of rows 20 apart: each row's tail is skipped
    for (const kernel of [simd, js]) {
      const { a, b, out, free } = fill(kernel, rows, floats, stride, rows + 1)
      const m = kernel.f32()
      kernel.axpyRows(a, b, rows, stride * 4, floats * 4, out)
      for (let t = 0; t < floats; t++) {
        let want = 0
        for (let r = 0; r < rows; r++) want += m[(a >>> 2) + r]! * m[(b >>> 2) + r * stride + t]!
        expect(Math.abs(m[(out >>> 2) + t]! - want)).toBeLessThan(1e-5 * (1 + Math.abs(want)))
      }
      expect(m[(out >>> 2) + floats]).toBe(1e6) // nothing written past len
      kernel.dotRows(a, b, rows, stride * 4, floats * 4, out)
      for (let r = 0; r < rows; r++) {
        let want = 0
        for (let t = 0; t < floats; t++) want += m[(a >>> 2) + t]! * m[(b >>> 2) + r * stride + t]!
        expect(Math.abs(m[(out >>> 2) + r]! - want)).toBeLessThan(1e-5 * (1 + Math.abs(want)))
      }
      free()
    }
  })

  // Floats per row: one vector, fewer than a pass of four, one pass, a pass and one, a pass and three, many passes.
  it.each([4, 12, 16, 20, 28, 132])("dot_rows over rows of %i floats matches float64 sums and the JS loop", (floats) => {
    const rows = 5, stride = floats + 8
    for (const kernel of [simd, js]) {
      const { a, b, out, free } = fill(kernel, rows, floats, stride, floats)
      const m = kernel.f32()
      kernel.dotRows(a, b, rows, stride * 4, floats * 4, out)
      for (let r = 0; r < rows; r++) {
        let want = 0
        for (let t = 0; t < floats; t++) want += m[(a >>> 2) + t]! * m[(b >>> 2) + r * stride + t]!
        expect(Math.abs(m[(out >>> 2) + r]! - want)).toBeLessThan(1e-5 * (1 + Math.abs(want)))
      }
      expect(m[(out >>> 2) + rows]).toBe(1e6) // nothing written past the rows
      free()
    }
  })
})
