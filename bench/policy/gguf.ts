/**
 * A small GGUF (version 3) writer: the single-file model format of ggml / llama.cpp, written
 * from its published description (ggml's docs/gguf.md). Everything is little-endian:
 *
 *   header        "GGUF", u32 version = 3, u64 tensor count, u64 key-value count
 *   metadata      per key: string key, u32 value type, value (an array: u32 element type,
 *                 u64 length, the elements); a string is a u64 byte length + UTF-8 bytes
 *   tensor infos  per tensor: string name, u32 dimension count, u64 per dimension (ggml order:
 *                 the contiguous dimension first, i.e. a row-major [rows, cols] is [cols, rows]),
 *                 u32 ggml type (0 = F32), u64 offset of its data within the data section
 *   padding       zeros up to the alignment (`general.alignment`, 32 by default)
 *   data          the tensors' bytes, each starting at a multiple of the alignment
 *
 * Only F32 tensors are written (no quantization). Tensor values are asked for one at a time,
 * so a multi-GiB model is never in memory twice.
 */
import * as fs from "node:fs/promises"
import { endianness } from "node:os"

export const GGUF_ALIGNMENT = 32
const GGML_TYPE_F32 = 0

/** GGUF value types (the ids of the format). */
const T = { u8: 0, i8: 1, u16: 2, i16: 3, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10, i64: 11, f64: 12 } as const

type Scalar = "u32" | "i32" | "f32" | "bool" | "string" | "u64"
export type GgufValue =
  | { readonly type: Scalar; readonly value: number | boolean | string }
  | { readonly type: "array"; readonly of: Exclude<Scalar, "bool">; readonly values: ReadonlyArray<number | string> }

export const gguf = {
  u32: (value: number): GgufValue => ({ type: "u32", value }),
  i32: (value: number): GgufValue => ({ type: "i32", value }),
  f32: (value: number): GgufValue => ({ type: "f32", value }),
  u64: (value: number): GgufValue => ({ type: "u64", value }),
  bool: (value: boolean): GgufValue => ({ type: "bool", value }),
  string: (value: string): GgufValue => ({ type: "string", value }),
  strings: (values: ReadonlyArray<string>): GgufValue => ({ type: "array", of: "string", values }),
  i32s: (values: ReadonlyArray<number>): GgufValue => ({ type: "array", of: "i32", values }),
  f32s: (values: ReadonlyArray<number>): GgufValue => ({ type: "array", of: "f32", values })
}

export interface GgufTensor {
  readonly name: string
  /** ggml order: dims[0] is the contiguous one (a row-major [rows, cols] matrix is [cols, rows]). */
  readonly dims: ReadonlyArray<number>
  /** The values, row-major, asked for when the tensor is written. */
  readonly data: () => Float32Array | Promise<Float32Array>
}

/** Growable little-endian byte buffer for the header, metadata and tensor infos. */
class Bytes {
  private buf = new Uint8Array(1 << 16)
  private view = new DataView(this.buf.buffer)
  length = 0

  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      const bigger = new Uint8Array(Math.max(this.buf.length * 2, this.length + n))
      bigger.set(this.buf.subarray(0, this.length))
      this.buf = bigger
      this.view = new DataView(bigger.buffer)
    }
    const at = this.length
    this.length += n
    return at
  }

  /** `room` may replace the buffer: the view is taken after it. */
  private put(n: number, write: (view: DataView, at: number) => void): void {
    const at = this.room(n)
    write(this.view, at)
  }
  u8 = (v: number) => this.put(1, (d, at) => d.setUint8(at, v))
  u32 = (v: number) => this.put(4, (d, at) => d.setUint32(at, v, true))
  i32 = (v: number) => this.put(4, (d, at) => d.setInt32(at, v, true))
  f32 = (v: number) => this.put(4, (d, at) => d.setFloat32(at, v, true))
  u64 = (v: number | bigint) => this.put(8, (d, at) => d.setBigUint64(at, BigInt(v), true))
  string = (s: string) => {
    const utf8 = new TextEncoder().encode(s)
    this.u64(utf8.length)
    const at = this.room(utf8.length)
    this.buf.set(utf8, at)
  }
  bytes = () => this.buf.subarray(0, this.length)
}

const writeScalar = (out: Bytes, type: Scalar, v: number | boolean | string): void => {
  switch (type) {
    case "u32": return out.u32(v as number)
    case "i32": return out.i32(v as number)
    case "f32": return out.f32(v as number)
    case "u64": return out.u64(v as number)
    case "bool": return out.u8(v ? 1 : 0)
    case "string": return out.string(v as string)
  }
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a

/** The bytes before the data section: header, metadata, tensor infos, padding. */
export const ggufPreamble = (metadata: ReadonlyArray<readonly [string, GgufValue]>, tensors: ReadonlyArray<Pick<GgufTensor, "name" | "dims">>): { readonly bytes: Uint8Array; readonly offsets: ReadonlyArray<number> } => {
  const out = new Bytes()
  out.u32(0x46554747) // "GGUF" read as a little-endian u32
  out.u32(3)
  out.u64(tensors.length)
  out.u64(metadata.length + 1) // + general.alignment
  const entries: ReadonlyArray<readonly [string, GgufValue]> = [["general.alignment", gguf.u32(GGUF_ALIGNMENT)], ...metadata]
  for (const [key, value] of entries) {
    out.string(key)
    out.u32(T[value.type])
    if (value.type !== "array") writeScalar(out, value.type, value.value)
    else {
      out.u32(T[value.of])
      out.u64(value.values.length)
      for (const v of value.values) writeScalar(out, value.of, v)
    }
  }
  const offsets: Array<number> = []
  let offset = 0
  for (const t of tensors) {
    out.string(t.name)
    out.u32(t.dims.length)
    for (const d of t.dims) out.u64(d)
    out.u32(GGML_TYPE_F32)
    out.u64(offset)
    offsets.push(offset)
    offset = alignUp(offset + 4 * t.dims.reduce((a, b) => a * b, 1), GGUF_ALIGNMENT)
  }
  while (out.length % GGUF_ALIGNMENT !== 0) out.u8(0)
  return { bytes: out.bytes(), offsets }
}

/** Writes a GGUF file; returns its size in bytes. */
export const writeGguf = async (file: string, metadata: ReadonlyArray<readonly [string, GgufValue]>, tensors: ReadonlyArray<GgufTensor>): Promise<number> => {
  if (endianness() !== "LE") throw new Error("writeGguf writes Float32Array bytes as they are: it needs a little-endian machine")
  const { bytes, offsets } = ggufPreamble(metadata, tensors)
  const handle = await fs.open(file, "w")
  try {
    await handle.write(bytes, 0, bytes.length, 0)
    for (const [i, t] of tensors.entries()) {
      const values = await t.data()
      const n = t.dims.reduce((a, b) => a * b, 1)
      if (values.length !== n) throw new Error(`GGUF tensor ${t.name}: ${values.length} values for dims [${t.dims.join(", ")}]`)
      // A Float32Array's bytes are the platform's order, checked to be little-endian above.
      const data = new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
      for (let done = 0; done < data.length;) {
        const { bytesWritten } = await handle.write(data, done, data.length - done, bytes.length + offsets[i]! + done)
        done += bytesWritten
      }
    }
    const end = tensors.length === 0 ? bytes.length : bytes.length + alignUp(offsets.at(-1)! + 4 * tensors.at(-1)!.dims.reduce((a, b) => a * b, 1), GGUF_ALIGNMENT)
    await handle.truncate(end) // the last tensor's padding
    return end
  } finally {
    await handle.close()
  }
}
