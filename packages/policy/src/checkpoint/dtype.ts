/**
 * 16-bit float formats of Hugging Face checkpoints, to and from float32. Both round to nearest
 * even when narrowing, as PyTorch does; NaN stays NaN and overflow becomes ±Infinity.
 */

const f32 = new Float32Array(1)
const u32 = new Uint32Array(f32.buffer)

/** bfloat16 is the upper half of a float32. Written into `out` when given (its first bits.length values). */
export const bf16ToF32 = (bits: Uint16Array, out: Float32Array = new Float32Array(bits.length)): Float32Array => {
  const outBits = new Uint32Array(out.buffer, out.byteOffset, bits.length)
  for (let i = 0; i < bits.length; i++) outBits[i] = bits[i]! << 16
  return out
}

export const f32ToBf16 = (values: Float32Array): Uint16Array => {
  const out = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) {
    f32[0] = values[i]!
    const b = u32[0]!
    if ((b & 0x7fffffff) > 0x7f800000) out[i] = (b >>> 16) | 0x40 // NaN, kept quiet
    else out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16
  }
  return out
}

export const f16ToF32 = (bits: Uint16Array, out: Float32Array = new Float32Array(bits.length)): Float32Array => {
  for (let i = 0; i < bits.length; i++) {
    const h = bits[i]!
    const sign = h & 0x8000 ? -1 : 1
    const exp = (h >> 10) & 0x1f
    const frac = h & 0x3ff
    if (exp === 0) out[i] = sign * frac * 2 ** -24
    else if (exp === 31) out[i] = frac === 0 ? sign * Infinity : NaN
    else out[i] = sign * (1 + frac / 1024) * 2 ** (exp - 15)
  }
  return out
}

export const f32ToF16 = (values: Float32Array): Uint16Array => {
  const out = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) {
    f32[0] = values[i]!
    const b = u32[0]!
    const sign = (b >>> 16) & 0x8000
    const exp = (b >>> 23) & 0xff
    const mant = b & 0x7fffff
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (mant !== 0 ? 0x200 : 0)
      continue
    }
    const e = exp - 127 + 15
    if (e >= 31) {
      out[i] = sign | 0x7c00
      continue
    }
    if (e <= 0) {
      // Subnormal (or zero): shift the full mantissa into place, rounding to nearest even.
      if (e < -10) {
        out[i] = sign
        continue
      }
      const m = mant | 0x800000
      const shift = 14 - e
      const half = 1 << (shift - 1)
      const rest = m & ((1 << shift) - 1)
      let r = m >>> shift
      if (rest > half || (rest === half && (r & 1) === 1)) r++
      out[i] = sign | r
      continue
    }
    let r = (e << 10) | (mant >>> 13)
    const rest = mant & 0x1fff
    if (rest > 0x1000 || (rest === 0x1000 && (r & 1) === 1)) r++ // may carry into the exponent: still right
    out[i] = sign | r
  }
  return out
}

/**
 * Float32 values of a tensor stored as F32, BF16 or F16: F32 data itself, or, with `out`,
 * written into `out` (its first data.length values; no fresh array).
 */
export const toF32 = (dtype: string, data: Float32Array | Int32Array | Uint16Array, out?: Float32Array): Float32Array => {
  if (dtype === "F32" && data instanceof Float32Array) {
    if (out === undefined) return data
    out.set(data)
    return out
  }
  if (dtype === "BF16" && data instanceof Uint16Array) return bf16ToF32(data, out)
  if (dtype === "F16" && data instanceof Uint16Array) return f16ToF32(data, out)
  throw new Error(`dtype ${dtype} is not a float format this loader converts (F32, BF16, F16)`)
}
