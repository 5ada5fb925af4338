/**
 * The safetensors format (https://huggingface.co/docs/safetensors), written and read here:
 *
 *   8 bytes   N, the header length, unsigned little-endian
 *   N bytes   a UTF-8 JSON object: { NAME: { dtype, shape, data_offsets: [begin, end] }, ...,
 *             "__metadata__": { string: string } }, padded with spaces so the data is 8-aligned
 *   the rest  the tensors' raw little-endian bytes; offsets are relative to its start and must
 *             cover it exactly, without holes or overlaps
 *
 * Supported dtypes: F32, I32, and Hugging Face checkpoints' BF16 and F16. Tensors are written in name order, so the same tensors give the
 * same bytes. `reins.crc32` in the metadata is the CRC-32 of the data section (checksum.ts; files
 * written before it have `reins.sha256`): a flipped bit anywhere, not only a truncation, is
 * detected on read.
 */
import * as fs from "node:fs/promises"
import { endianness } from "node:os"
import { CHECKSUM_KEYS, type ChecksumAlgorithm, checksumEntry, makeChecksum, recordedChecksum } from "./checksum.js"
import { ChecksumThread } from "./checksumThread.js"

export type DType = "F32" | "I32" | "BF16" | "F16"

/** Bytes per element of each dtype. */
export const ELEMENT_BYTES: Record<DType, number> = { F32: 4, I32: 4, BF16: 2, F16: 2 }

/** A tensor's values: BF16 and F16 as their raw 16-bit patterns (see dtype.ts to convert). */
export interface TensorEntry {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
  readonly data: Float32Array | Int32Array | Uint16Array
}

export interface SafetensorsFile {
  readonly tensors: ReadonlyMap<string, TensorEntry>
  readonly metadata: Readonly<Record<string, string>>
}

/** What is wrong with a file; the caller adds which file it was. */
export class SafetensorsError extends Error {
  override readonly name = "SafetensorsError"
}

const MAX_HEADER = 100 * 1024 * 1024
/** Bytes `scan` reads at a time: large enough for few reads, small enough to stay in cache while it is hashed and copied. */
const SCAN_CHUNK = 4 << 20
/** Data sections from this size on are hashed by a second thread (checksumThread.ts); below it, starting one costs more than it saves. */
const BACKGROUND_HASH_BYTES = 64 << 20
/**
 * Buffers the reader and the hashing thread share: the slack between them, and room for the
 * reads ahead. A CRC-32 reader hashes the chunks itself until the thread has started (~35 ms
 * here), so a few buffers are slack enough. With 24, and the reader waiting for the thread to
 * start, a SmolLM2-135M scan with nothing to visit read 1.8 GB/s (first touching 96 MiB of
 * buffers, and waiting); 2.6–2.9 with the hand-over (4 buffers, one read ahead); 7 with no
 * checksum. A SHA-256 (files written before 2026-12-07) cannot be handed over midway: the thread
 * hashes all of it, and the reader fills buffers while it starts.
 */
const HASH_SLOTS: Record<ChecksumAlgorithm, number> = { crc32: 8, sha256: 24 }
/**
 * Chunks read ahead of the one `visit` has. With one, a short visit (a norm's few floats) left
 * the next large read to be waited for whole, and reads slowed by the hashing thread's share of
 * the second core were waited for too: a SmolLM2-135M scan (visits of 0.5 ms per MB, like the
 * loader's) waited 41–68 ms for reads with one ahead, 8–17 with four (and 8 hashing buffers).
 */
const READ_AHEAD = 4
const littleEndian = endianness() === "LE"

const mismatch = (algorithm: ChecksumAlgorithm) =>
  new SafetensorsError(`corrupt: the data does not match its ${algorithm === "crc32" ? "CRC-32" : "SHA-256"} checksum`)

const bytesOf = (a: TensorEntry["data"]): Uint8Array => {
  if (littleEndian) return new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
  const out = new Uint8Array(a.byteLength)
  const dv = new DataView(out.buffer)
  for (let i = 0; i < a.length; i++) {
    if (a instanceof Float32Array) dv.setFloat32(i * 4, a[i]!, true)
    else if (a instanceof Int32Array) dv.setInt32(i * 4, a[i]!, true)
    else dv.setUint16(i * 2, a[i]!, true)
  }
  return out
}

const matchesDtype = (t: TensorEntry): boolean =>
  t.dtype === "F32" ? t.data instanceof Float32Array : t.dtype === "I32" ? t.data instanceof Int32Array : t.data instanceof Uint16Array

/** Serializes tensors (and string metadata) to safetensors bytes. */
export const encodeSafetensors = (tensors: Readonly<Record<string, TensorEntry>>, metadata: Readonly<Record<string, string>> = {}): Uint8Array => {
  const names = Object.keys(tensors).sort()
  const header: Record<string, unknown> = {}
  let offset = 0
  for (const name of names) {
    const t = tensors[name]!
    const size = t.shape.reduce((a, b) => a * b, 1)
    if (size !== t.data.length) throw new SafetensorsError(`tensor ${name}: shape [${t.shape.join(", ")}] does not match ${t.data.length} values`)
    if (!matchesDtype(t)) throw new SafetensorsError(`tensor ${name}: dtype ${t.dtype} does not match its data`)
    header[name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + t.data.byteLength] }
    offset += t.data.byteLength
  }
  const data = new Uint8Array(offset)
  for (const name of names) {
    const [begin] = (header[name] as { data_offsets: [number, number] }).data_offsets
    data.set(bytesOf(tensors[name]!.data), begin)
  }
  // A checksum in the caller's metadata (one read from another file) would not be this data's.
  const kept = Object.fromEntries(Object.entries(metadata).filter(([key]) => !CHECKSUM_KEYS.some(([k]) => k === key)))
  const json = JSON.stringify({ __metadata__: { ...kept, ...checksumEntry(data) }, ...header })
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

/** Where one tensor's bytes are, as the header says (offsets relative to the data section). */
export interface TensorHeader {
  readonly dtype: DType
  readonly shape: ReadonlyArray<number>
  readonly begin: number
  readonly end: number
}

export interface SafetensorsHeader {
  readonly tensors: ReadonlyMap<string, TensorHeader>
  readonly metadata: Readonly<Record<string, string>>
  /** Bytes before the data section (8 + the header length). */
  readonly dataStart: number
  /** Bytes of the data section. */
  readonly dataLength: number
}

/**
 * Validates a header against the data section's length: dtypes, shapes, offsets that hold their
 * shapes and cover the data exactly, without holes or overlaps.
 */
const parseHeader = (json: Uint8Array, dataStart: number, dataLength: number): SafetensorsHeader => {
  let header: unknown
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(json))
  } catch (e) {
    throw new SafetensorsError(`corrupt header: ${e instanceof Error ? e.message : String(e)}`)
  }
  if (!isRecord(header)) throw new SafetensorsError("corrupt header: not a JSON object")
  const metadata: Record<string, string> = {}
  const tensors = new Map<string, TensorHeader>()
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
    if (typeof dtype !== "string" || !(dtype in ELEMENT_BYTES)) {
      throw new SafetensorsError(`tensor ${name}: unsupported dtype ${JSON.stringify(dtype)} (${Object.keys(ELEMENT_BYTES).join(", ")} are supported)`)
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new SafetensorsError(`tensor ${name}: invalid shape`)
    if (!Array.isArray(data_offsets) || data_offsets.length !== 2 || !data_offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      throw new SafetensorsError(`tensor ${name}: invalid data_offsets`)
    }
    const [begin, end] = data_offsets as [number, number]
    const size = (shape as Array<number>).reduce((a, b) => a * b, 1)
    if (end < begin || end - begin !== size * ELEMENT_BYTES[dtype as DType]) {
      throw new SafetensorsError(`tensor ${name}: data_offsets [${begin}, ${end}] do not hold ${dtype} [${shape.join(", ")}]`)
    }
    if (end > dataLength) throw new SafetensorsError(`truncated: tensor ${name} ends at byte ${end} of a ${dataLength}-byte data section`)
    ranges.push([begin, end, name])
    tensors.set(name, { dtype: dtype as DType, shape: shape as Array<number>, begin, end })
  }
  ranges.sort((a, b) => a[0] - b[0])
  let covered = 0
  for (const [begin, end, name] of ranges) {
    if (begin !== covered) throw new SafetensorsError(`corrupt: tensor ${name} starts at byte ${begin}, expected ${covered} (hole or overlap)`)
    covered = end
  }
  if (covered !== dataLength) throw new SafetensorsError(`corrupt: ${dataLength - covered} bytes after the last tensor`)
  return { tensors, metadata, dataStart, dataLength }
}

/** The header length stored in the first 8 bytes, checked against what follows it. */
const headerLength = (first8: Uint8Array, total: number): number => {
  if (total < 8) throw new SafetensorsError(`truncated: ${total} bytes, shorter than the 8-byte header length`)
  const n = new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true)
  if (n > BigInt(Math.min(MAX_HEADER, total - 8))) throw new SafetensorsError(`truncated or corrupt: header length ${n} exceeds the ${total - 8} bytes after it`)
  return Number(n)
}

/**
 * Typed values of one tensor's little-endian bytes. `bytes` must start on an element boundary
 * of its buffer; unless `owned`, they are copied first (they may be a window of a larger file).
 * On a little-endian host an owned buffer is viewed, not copied: every fresh copy of a tensor
 * costs page faults, which on some machines cost more than reading the file.
 */
export const typedValues = (bytes: Uint8Array, dtype: DType, owned = false): TensorEntry["data"] => {
  const own = owned ? bytes : new Uint8Array(bytes)
  const size = own.length / ELEMENT_BYTES[dtype]
  if (littleEndian) {
    const { buffer, byteOffset } = own
    return dtype === "F32" ? new Float32Array(buffer, byteOffset, size) : dtype === "I32" ? new Int32Array(buffer, byteOffset, size) : new Uint16Array(buffer, byteOffset, size)
  }
  const dv = new DataView(own.buffer, own.byteOffset, own.byteLength)
  if (dtype === "F32") return Float32Array.from({ length: size }, (_, i) => dv.getFloat32(i * 4, true))
  if (dtype === "I32") return Int32Array.from({ length: size }, (_, i) => dv.getInt32(i * 4, true))
  return Uint16Array.from({ length: size }, (_, i) => dv.getUint16(i * 2, true))
}

/** Parses and fully validates safetensors bytes. Throws `SafetensorsError` saying what is wrong. */
export const decodeSafetensors = (bytes: Uint8Array): SafetensorsFile => {
  const n = headerLength(bytes.subarray(0, 8), bytes.length)
  const data = bytes.subarray(8 + n)
  const header = parseHeader(bytes.subarray(8, 8 + n), 8 + n, data.length)
  const tensors = new Map<string, TensorEntry>()
  for (const [name, t] of header.tensors) tensors.set(name, { dtype: t.dtype, shape: t.shape, data: typedValues(data.subarray(t.begin, t.end), t.dtype) })
  const recorded = recordedChecksum(header.metadata)
  if (recorded !== undefined) {
    const sum = makeChecksum(recorded.algorithm)
    sum.update(data)
    if (sum.digest() !== recorded.hex) throw mismatch(recorded.algorithm)
  }
  return { tensors, metadata: header.metadata }
}

/** One read of `scan`: `length` bytes from `at` (in the data section) of tensor `name`. */
interface ScanChunk {
  readonly name: string
  readonly tensor: TensorHeader
  readonly at: number
  readonly length: number
}

/**
 * Reads a safetensors file tensor by tensor (a large checkpoint is never held whole in memory):
 * the header is read and validated against the file's size on open, each tensor on demand.
 */
export class SafetensorsReader {
  private constructor(
    private readonly handle: fs.FileHandle,
    readonly header: SafetensorsHeader
  ) {}

  static async open(file: string): Promise<SafetensorsReader> {
    const handle = await fs.open(file, "r")
    try {
      const { size } = await handle.stat()
      const first8 = new Uint8Array(8)
      await handle.read(first8, 0, Math.min(8, size), 0)
      const n = headerLength(first8, size)
      const json = new Uint8Array(n)
      await handle.read(json, 0, n, 8)
      return new SafetensorsReader(handle, parseHeader(json, 8 + n, size - 8 - n))
    } catch (e) {
      await handle.close()
      throw e
    }
  }

  /** One tensor's values in its stored dtype. */
  async read(name: string): Promise<TensorEntry> {
    const t = this.header.tensors.get(name)
    if (t === undefined) throw new SafetensorsError(`no tensor ${name}`)
    const bytes = new Uint8Array(t.end - t.begin)
    await this.readFully(bytes, t.begin, name)
    return { dtype: t.dtype, shape: t.shape, data: typedValues(bytes, t.dtype, true) }
  }

  /** Fills `bytes` from offset `at` of the data section. */
  private async readFully(bytes: Uint8Array, at: number, name: string): Promise<void> {
    for (let done = 0; done < bytes.length;) {
      const { bytesRead } = await this.handle.read(bytes, done, bytes.length - done, this.header.dataStart + at + done)
      if (bytesRead === 0) throw new SafetensorsError(`truncated: tensor ${name} could not be read whole`)
      done += bytesRead
    }
  }

  /**
   * Reads the data section once, in file order, handing `visit` each tensor in chunks of whole
   * rows of its last axis (at most 4 MiB unless one row is larger): the chunk's bytes and the
   * index of its first element. The next chunks (READ_AHEAD) are read on libuv's threads while
   * `visit` runs, into other buffers; a chunk's bytes are overwritten once `visit` returns, so it
   * must be done with them by then. Tensors `wanted` rejects are skipped — unless the file
   * records a checksum (checksum.ts): then every byte is hashed (a large file's by a second
   * thread, from the same buffers as `visit` reads, a CRC-32's first chunks here while that
   * thread starts; a small file's here), and a mismatch throws once all are read, so a caller
   * builds nothing from what it was handed until `scan` has returned.
   */
  async scan(wanted: (name: string) => boolean, visit: (name: string, tensor: TensorHeader, bytes: Uint8Array, firstElement: number) => void): Promise<void> {
    const expected = recordedChecksum(this.header.metadata)
    const chunks = this.chunks((name) => wanted(name) || expected !== undefined)
    const size = chunks.reduce((m, c) => Math.max(m, c.length), 0)
    const thread = expected !== undefined && this.header.dataLength >= BACKGROUND_HASH_BYTES ? ChecksumThread.tryStart(expected.algorithm, HASH_SLOTS[expected.algorithm], size) : undefined
    // Hashes here: everything without a thread; with one, a CRC-32's first chunks, until it has started.
    const hash = expected !== undefined ? makeChecksum(expected.algorithm) : undefined
    let threadHashes = thread !== undefined && expected?.algorithm === "sha256"
    const buffers = thread?.slots ?? Array.from({ length: READ_AHEAD + 1 }, () => new Uint8Array(size))
    const ahead = Math.min(READ_AHEAD, buffers.length - 1)
    // Reads in flight, by chunk. Each is issued as soon as its buffer is free (at once when it
    // is): `visit` runs synchronously next, and a read begun in a microtask would begin only once
    // `visit` is done.
    const reads = new Map<number, Promise<void>>()
    const read = (k: number): void => {
      if (k >= chunks.length) return
      const { at, length, name } = chunks[k]!
      const slot = k % buffers.length
      const go = () => this.readFully(buffers[slot]!.subarray(0, length), at, name)
      const done = thread === undefined || thread.isFree(slot) ? go() : thread.free(slot).then(go)
      // A read that fails while an earlier one is awaited is not unhandled: it throws when its turn comes.
      done.catch(() => {})
      reads.set(k, done)
    }
    for (let k = 0; k < ahead; k++) read(k)
    try {
      for (let k = 0; k < chunks.length; k++) {
        await reads.get(k)
        reads.delete(k)
        // Into the buffer of chunk k + ahead - buffers.length, which `visit` is done with.
        read(k + ahead)
        const { name, tensor, at, length } = chunks[k]!
        const bytes = buffers[k % buffers.length]!.subarray(0, length)
        if (!threadHashes && thread?.ready === true) {
          thread.continueFrom(hash!.digest())
          threadHashes = true
        }
        if (threadHashes) thread!.update(k % buffers.length, length)
        else hash?.update(bytes)
        if (wanted(name)) visit(name, tensor, bytes, (at - tensor.begin) / ELEMENT_BYTES[tensor.dtype])
      }
      if (expected === undefined) return
      // The thread failing is not the file's fault: then the data is read again and hashed here.
      const digest = threadHashes ? await thread!.digest().catch(() => this.checksum(expected.algorithm)) : hash!.digest()
      if (digest !== expected.hex) throw mismatch(expected.algorithm)
    } catch (e) {
      // No read may still be writing into the buffers (or using the descriptor) once this returns.
      await Promise.allSettled(reads.values())
      throw e
    } finally {
      await thread?.stop()
    }
  }

  /** The reads `scan` makes, in file order: each tensor `read` accepts, in whole rows of ≤ SCAN_CHUNK bytes. */
  private chunks(read: (name: string) => boolean): Array<ScanChunk> {
    // parseHeader checked that the tensors cover the data section exactly, so in offset order
    // they are the data section, and hashing them is hashing it.
    const order = [...this.header.tensors].sort((a, b) => a[1].begin - b[1].begin)
    const out: Array<ScanChunk> = []
    for (const [name, tensor] of order) {
      if (!read(name)) continue
      const row = ELEMENT_BYTES[tensor.dtype] * (tensor.shape.length > 1 ? tensor.shape[tensor.shape.length - 1]! : 1)
      const step = row === 0 ? SCAN_CHUNK : Math.max(row, Math.floor(SCAN_CHUNK / row) * row)
      for (let at = tensor.begin; at < tensor.end; at += step) out.push({ name, tensor, at, length: Math.min(step, tensor.end - at) })
    }
    return out
  }

  /** The checksum of the data section, read here. */
  private async checksum(algorithm: ChecksumAlgorithm): Promise<string> {
    const sum = makeChecksum(algorithm)
    const buffer = new Uint8Array(SCAN_CHUNK)
    for (let at = 0; at < this.header.dataLength; at += SCAN_CHUNK) {
      const bytes = buffer.subarray(0, Math.min(SCAN_CHUNK, this.header.dataLength - at))
      await this.readFully(bytes, at, "(checksum)")
      sum.update(bytes)
    }
    return sum.digest()
  }

  close(): Promise<void> {
    return this.handle.close()
  }
}
