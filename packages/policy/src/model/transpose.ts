/** Transposes of row-major Float32Arrays (no tfjs: the checkpoint readers use them too). */

/**
 * `out[j·stride + offset + i] = src[i·c + j]` for a row-major [r, c] matrix, in 16×16 blocks (both
 * sides stay in cache): its transpose [c, r], or with `stride` and `offset` rows offset.. of a
 * taller matrix's transpose [c, stride].
 */
export const transposeInto = (src: Float32Array, out: Float32Array, r: number, c: number, stride = r, offset = 0): void => {
  for (let i0 = 0; i0 < r; i0 += 16) {
    const i1 = Math.min(r, i0 + 16)
    for (let j0 = 0; j0 < c; j0 += 16) {
      const j1 = Math.min(c, j0 + 16)
      for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) out[j * stride + offset + i] = src[i * c + j]!
    }
  }
}

/** [rows, cols] row-major → a new [cols, rows]. */
export const transpose = (x: Float32Array, rows: number, cols: number): Float32Array => {
  const out = new Float32Array(x.length)
  transposeInto(x, out, rows, cols)
  return out
}
