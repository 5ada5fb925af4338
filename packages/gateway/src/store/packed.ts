/**
 * Typed arrays as BLOBs: the raw bytes of the array in little-endian order (the byte order of
 * every platform Node supports; checked once when a store opens).
 */
import os from "node:os"

export const assertLittleEndian = (): void => {
  if (os.endianness() !== "LE") throw new Error("reins stores token arrays little-endian; this platform is big-endian")
}

export const toBlob = (a: Int32Array | Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength)

/** Copies, so the result is aligned and owns its memory. */
const copy = (b: Uint8Array | null | undefined): ArrayBuffer => {
  if (b == null || b.byteLength === 0) return new ArrayBuffer(0)
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer
}

export const int32FromBlob = (b: Uint8Array | null | undefined): Int32Array => new Int32Array(copy(b))
export const float32FromBlob = (b: Uint8Array | null | undefined): Float32Array => new Float32Array(copy(b))
