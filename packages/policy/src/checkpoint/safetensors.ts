/**
 * The safetensors format (https://huggingface.co/docs/safetensors), written and read here:
 *
 *   8 bytes   N, the header length, unsigned little-endian
 *   N bytes   a UTF-8 JSON object: { NAME: { dtype, shape, data_offsets: [begin, end] }, ...,
 *             "__metadata__": { string: string } }, padded with spaces so the data is 8-aligned
 *   the rest  the tensors' raw little-endian bytes; offsets are relative to its start and must
 *             cover it exactly, without holes or overlaps
 *
 * Supported dtypes: F32 and I32. Tensors are written in name order, so the same tensors give the
 * same bytes. `reins.sha256` in the metadata is the SHA-256 of the data section: a flipped bit
 * anywhere, not only a truncation, is detected on read.
 */
import { createHash } from "node:crypto"
import { endianness } from "node:os"

export type DType = "F32" | "I32"

export interface TensorEntry {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
  readonly data: Float32Array | Int32Array
}

export interface SafetensorsFile {
  readonly tensors: ReadonlyMap<string, TensorEntry>
  readonly metadata: Readonly<Record<string, string>>
}

/** What is wrong with a file; the caller adds which file it was. */
export class SafetensorsError extends Error {
  override readonly name = "SafetensorsError"
}

const CHECKSUM = "reins.sha256"
const MAX_HEADER = 100 * 1024 * 1024
const littleEndian = endianness() === "LE"

const bytesOf = (a: Float32Array | Int32Array): Uint8Array => {
  if (littleEndian) return new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
  const out = new Uint8Array(a.byteLength)
  const dv = new DataView(out.buffer)
  for (let i = 0; i < a.length; i++) (a instanceof Float32Array ? dv.setFloat32(i * 4, a[i]!, true) : dv.setInt32(i * 4, a[i]!, true))
  return out
}

const sha256 = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

/** Serializes tensors (and string metadata) to safetensors bytes. */
export const encodeSafetensors = (tensors: Readonly<Record<string, TensorEntry>>, metadata: Readonly<Record<string, string>> = {}): Uint8Array => {
  const names = Object.keys(tensors).sort()
  const header: Record<string, unknown> = {}
  let offset = 0
  for (const name of names) {
    const t = tensors[name]!
    const size = t.shape.reduce((a, b) => a * b, 1)
    if (size !== t.data.length) throw new SafetensorsError(`tensor ${name}: shape [${t.shape.join(", ")}] does not match ${t.data.length} values`)
    if ((t.dtype === "F32") !== t.data instanceof Float32Array) throw new SafetensorsError(`tensor ${name}: dtype ${t.dtype} does not match its data`)
    header[name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + t.data.byteLength] }
    offset += t.data.byteLength
  }
  const data = new Uint8Array(offset)
  for (const name of names) {
    const [begin] = (header[name] as { data_offsets: [number, number] }).data_offsets
    data.set(bytesOf(tensors[name]!.data), begin)
  }
  const json = JSON.stringify({ __metadata__: { ...metadata, [CHECKSUM]: sha256(data) }, ...header })
  const encoded = new TextEncoder().encode(json)
  const headerLength = Math.ceil(encoded.length / 8) * 8
  const out = new Uint8Array(8 + headerLength + data.length)
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLength), true)
  out.fill(0x20, 8, 8 + headerLength)
  out.set(encoded, 8)
  out.set(data, 8 + headerLength)
  return out
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Parses and fully validates safetensors bytes. Throws `SafetensorsError` saying what is wrong. */
export const decodeSafetensors = (bytes: Uint8Array): SafetensorsFile => {
  if (bytes.length < 8) throw new SafetensorsError(`truncated: ${bytes.length} bytes, shorter than the 8-byte header length`)
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true)
  if (headerLength > BigInt(Math.min(MAX_HEADER, bytes.length - 8))) {
    throw new SafetensorsError(`truncated or corrupt: header length ${headerLength} exceeds the ${bytes.length - 8} bytes after it`)
  }
  const n = Number(headerLength)
  let header: unknown
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + n)))
  } catch (e) {
    throw new SafetensorsError(`corrupt header: ${e instanceof Error ? e.message : String(e)}`)
  }
  if (!isRecord(header)) throw new SafetensorsError("corrupt header: not a JSON object")
  const data = bytes.subarray(8 + n)
  const metadata: Record<string, string> = {}
  const tensors = new Map<string, TensorEntry>()
  const ranges: Array<[number, number, string]> = []
  for (const [name, value] of Object.entries(header)) {
    if (name === "__metadata__") {
      if (!isRecord(value)) throw new SafetensorsError("corrupt header: __metadata__ is not an object")
      for (const [k, v] of Object.entries(value)) {
        if (typeof v !== "string") throw new SafetensorsError(`corrupt header: metadata ${k} is not a string`)
        metadata[k] = v
      }
      continue
    }
    if (!isRecord(value)) throw new SafetensorsError(`corrupt header: entry ${name} is not an object`)
    const { dtype, shape, data_offsets } = value
    if (dtype !== "F32" && dtype !== "I32") throw new SafetensorsError(`tensor ${name}: unsupported dtype ${JSON.stringify(dtype)} (F32 and I32 are supported)`)
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new SafetensorsError(`tensor ${name}: invalid shape`)
    if (!Array.isArray(data_offsets) || data_offsets.length !== 2 || !data_offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      throw new SafetensorsError(`tensor ${name}: invalid data_offsets`)
    }
    const [begin, end] = data_offsets as [number, number]
    const size = (shape as Array<number>).reduce((a, b) => a * b, 1)
    if (end < begin || end - begin !== size * 4) throw new SafetensorsError(`tensor ${name}: data_offsets [${begin}, ${end}] do not hold shape [${shape.join(", ")}]`)
    if (end > data.length) throw new SafetensorsError(`truncated: tensor ${name} ends at byte ${end} of a ${data.length}-byte data section`)
    ranges.push([begin, end, name])
    const copy = new Uint8Array(data.subarray(begin, end)) // aligned, owned
    let values: Float32Array | Int32Array = dtype === "F32" ? new Float32Array(copy.buffer) : new Int32Array(copy.buffer)
    if (!littleEndian) {
      const dv = new DataView(copy.buffer)
      values = dtype === "F32" ? Float32Array.from({ length: size }, (_, i) => dv.getFloat32(i * 4, true)) : Int32Array.from({ length: size }, (_, i) => dv.getInt32(i * 4, true))
    }
    tensors.set(name, { dtype, shape: shape as Array<number>, data: values })
  }
  ranges.sort((a, b) => a[0] - b[0])
  let covered = 0
  for (const [begin, end, name] of ranges) {
    if (begin !== covered) throw new SafetensorsError(`corrupt: tensor ${name} starts at byte ${begin}, expected ${covered} (hole or overlap)`)
    covered = end
  }
  if (covered !== data.length) throw new SafetensorsError(`corrupt: ${data.length - covered} bytes after the last tensor`)
  const checksum = metadata[CHECKSUM]
  if (checksum !== undefined && checksum !== sha256(data)) throw new SafetensorsError("corrupt: the data does not match its SHA-256 checksum")
  return { tensors, metadata }
}
