/** Transposes of row-major Float32Arrays (no tfjs: the checkpoint readers use them too). */

/**
 * `out[j·stride + offset + i] = src[i·c + j]` for a row-major [r, c] matrix: its transpose [c, r],
 * or with `stride` and `offset` rows offset.. of a taller matrix's transpose [c, stride].
 *
 * Eight output rows at a time, each written front to back while `src` is read row by row: eight
 * sequential write streams. Square blocks (16×16) ran 3–4× slower here: with strides of a
 * multiple of 4 KiB, as every weight matrix has, a block's rows share cache sets.
 */
export const transposeInto = (src: Float32Array, out: Float32Array, r: number, c: number, stride = r, offset = 0): void => {
  let j = 0
  for (; j + 8 <= c; j += 8) {
    for (let i = 0, s = j, o = j * stride + offset; i < r; i++, s += c, o++) {
      out[o] = src[s]!
      out[o + stride] = src[s + 1]!
      out[o + 2 * stride] = src[s + 2]!
      out[o + 3 * stride] = src[s + 3]!
      out[o + 4 * stride] = src[s + 4]!
      out[o + 5 * stride] = src[s + 5]!
      out[o + 6 * stride] = src[s + 6]!
      out[o + 7 * stride] = src[s + 7]!
    }
  }
  for (; j < c; j++) for (let i = 0, s = j, o = j * stride + offset; i < r; i++, s += c, o++) out[o] = src[s]!
}

/** [rows, cols] row-major → a new [cols, rows]. */
export const transpose = (x: Float32Array, rows: number, cols: number): Float32Array => {
  const out = new Float32Array(x.length)
  transposeInto(x, out, rows, cols)
  return out
}
