/**
 * The two loops that dominate batched decoding — a query row against every cached key
 * (`dotRows`) and the probability-weighted sum of cached values (`axpyRows`) — as a tiny
 * WebAssembly module with 128-bit SIMD (4 floats per instruction), plus the memory the KV caches
 * live in. Everything else stays in JavaScript. gemmKernel.ts reuses both for a single row's
 * product with a weight matrix (decoding one sequence in place on tfjs's heap): `axpy_rows` over
 * a matrix stored [in, out], `dot_rows` over one stored [out, in].
 *
 * Why hand-assembled bytes: V8 does not vectorize JS loops (they reach ~1.5-2 GMAC/s here, and
 * attention over the cache was ~2/3 of a batched decode step), tfjs has no kernel that fits
 * (its batched matmul is a scalar loop, and per-op overhead exceeds the work at these sizes),
 * and a build step for a .wasm file would be a toolchain for a hundred instructions. The module is
 * validated at load; where wasm SIMD is unavailable the same functions run as JS loops. The
 * instructions are listed in `dotRowsBody` and `axpyRowsBody` below (the second from small
 * helpers, since it unrolls a group of eight rows).
 *
 * Addresses and lengths are in bytes; strides and lengths must be multiples of 16 (4 floats).
 */

import {
  BLOCK, BR, BR_IF, END, F32_ADD, F32_LOAD, F32_STORE, F32X4_ADD, F32X4_MUL, F32X4_SPLAT, GET, HEADER, I32, I32_ADD, I32_CONST,
  I32_EQZ, I32_GT_U, I32_LT_U, I32_MUL, I32_SHL, i32, lane, leb, LOOP, section, SET, str, TEE, V128, V128_LOAD, V128_STORE, V128_ZERO,
  v128Load, vec, VOID, voidType, WebAssembly, type WasmMemory
} from "./wasmAssembly.js"

// Parameters of both functions: (a, b, rows, stride, len, out); locals: r, t, row pointer, then the
// v128s: dot_rows's accumulators, axpy_rows's weights (ACC + g for row g of a group).
const [A, B, ROWS, STRIDE, LEN, OUT, R, T, ROW, ACC] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

/** Vectors per pass of `dot_rows`, each into its own accumulator: the adds of one pass do not wait on each other. */
const DOT_UNROLL = 4
/** acc_u += a[t + 16u]·row[t + 16u] */
const dotTerm = (u: number) => [
  GET, ACC + u, GET, A, GET, T, I32_ADD, ...v128Load(16 * u), GET, ROW, GET, T, I32_ADD, ...v128Load(16 * u), ...F32X4_MUL, ...F32X4_ADD, SET, ACC + u
]
/** `while (counter + step <= limit) { body; counter += step }`, over locals. */
const whileRoomFor = (counter: number, step: number, limit: number, body: Array<number>) => [
  BLOCK, VOID,
  LOOP, VOID,
  GET, counter, ...i32(step), I32_ADD, GET, limit, I32_GT_U, BR_IF, 1,
  ...body,
  GET, counter, ...i32(step), I32_ADD, SET, counter,
  BR, 0,
  END,
  END
]
/** `while (t + step <= len) { body; t += step }` */
const whileVectorsLeft = (step: number, body: Array<number>) => whileRoomFor(T, step, LEN, body)

/**
 * out[r] = Σ_t a[t]·row_r[t]: one query against `rows` keys, or one row of x against the rows of
 * a matrix stored [out, in] (gemmKernel.ts `heapGemmNtInto`). Four vectors per pass into four
 * accumulators, then the rest one by one: one row's product over Qwen3-0.6B's matrices stored so
 * streamed at ~21 GB/s here (eight per pass: ~18; `axpy_rows` over [in, out]: ~16, same process).
 */
export const dotRowsBody = [
  ...vec([[3, I32], [DOT_UNROLL, V128]]),
  BLOCK, VOID,
  GET, ROWS, I32_EQZ, BR_IF, 0,
  GET, B, SET, ROW,
  I32_CONST, 0, SET, R,
  LOOP, VOID,
  ...Array.from({ length: DOT_UNROLL }, (_, u) => [...V128_ZERO, SET, ACC + u]).flat(),
  I32_CONST, 0, SET, T,
  ...whileVectorsLeft(16 * DOT_UNROLL, Array.from({ length: DOT_UNROLL }, (_, u) => dotTerm(u)).flat()),
  ...whileVectorsLeft(16, dotTerm(0)),
  GET, OUT, GET, R, I32_CONST, 2, I32_SHL, I32_ADD,
  GET, ACC, GET, ACC + 1, ...F32X4_ADD, GET, ACC + 2, GET, ACC + 3, ...F32X4_ADD, ...F32X4_ADD, SET, ACC,
  GET, ACC, ...lane(0), GET, ACC, ...lane(1), F32_ADD, GET, ACC, ...lane(2), F32_ADD, GET, ACC, ...lane(3), F32_ADD,
  ...F32_STORE,
  GET, ROW, GET, STRIDE, I32_ADD, SET, ROW,
  GET, R, I32_CONST, 1, I32_ADD, TEE, R, GET, ROWS, I32_LT_U, BR_IF, 0,
  END,
  END,
  END
]

/** Rows of b that one pass of `axpy_rows` adds into out: out is loaded and stored once per 8 rows, not per row. */
const GROUP = 8
/** The weight of row `r + g` (a[r + g]) in all four lanes. */
const splatWeight = (g: number) => [GET, A, GET, R, ...i32(g), I32_ADD, I32_CONST, 2, I32_SHL, I32_ADD, ...F32_LOAD, ...F32X4_SPLAT]
/** row_g[t]·w_g added to the vector on the stack: row g of the group at `row + g·stride`. */
const addRowTerm = (g: number) => [
  GET, ROW, ...(g === 0 ? [] : [GET, STRIDE, ...i32(g), I32_MUL, I32_ADD]), GET, T, I32_ADD, ...V128_LOAD,
  GET, ACC + g, ...F32X4_MUL, ...F32X4_ADD
]
/** `t = 0; do { out[t] = out[t] + Σ_g row_g[t]·w_g; t += 16 } while (t < len)` over `rows` rows of the group. */
const addRowsToOut = (rows: number) => [
  I32_CONST, 0, SET, T,
  LOOP, VOID,
  GET, OUT, GET, T, I32_ADD,
  GET, OUT, GET, T, I32_ADD, ...V128_LOAD,
  ...Array.from({ length: rows }, (_, g) => addRowTerm(g)).flat(),
  ...V128_STORE,
  GET, T, I32_CONST, 16, I32_ADD, TEE, T, GET, LEN, I32_LT_U, BR_IF, 0,
  END
]
/** `while (r + n <= rows) { body; row += n·stride; r += n }` */
const whileRowsLeft = (n: number, body: Array<number>) => whileRoomFor(R, n, ROWS, [...body, GET, ROW, GET, STRIDE, ...i32(n), I32_MUL, I32_ADD, SET, ROW])

/**
 * out[t] = Σ_r a[r]·row_r[t]: probabilities against `rows` values, or one row of x against the
 * rows of W (gemmKernel.ts; out zeroed first). Eight rows per pass over out, then the rest one by
 * one: decoding one sequence streams W from memory at ~16 GB/s here this way, ~11 one row per pass
 * (out's loads and stores competed with W's).
 */
export const axpyRowsBody = [
  ...vec([[3, I32], [GROUP, V128]]),
  I32_CONST, 0, SET, T,
  LOOP, VOID,
  GET, OUT, GET, T, I32_ADD, ...V128_ZERO, ...V128_STORE,
  GET, T, I32_CONST, 16, I32_ADD, TEE, T, GET, LEN, I32_LT_U, BR_IF, 0,
  END,
  GET, B, SET, ROW,
  I32_CONST, 0, SET, R,
  ...whileRowsLeft(GROUP, [...Array.from({ length: GROUP }, (_, g) => [...splatWeight(g), SET, ACC + g]).flat(), ...addRowsToOut(GROUP)]),
  ...whileRowsLeft(1, [...splatWeight(0), SET, ACC, ...addRowsToOut(1)]),
  END
]

const kernelBytes = (): Uint8Array =>
  new Uint8Array([
    ...HEADER,
    ...section(1, vec([voidType(6)])), // (i32 ×6) → ()
    ...section(3, vec([[0], [0]])),
    ...section(5, vec([[0x00, 1]])), // one growable memory, 1 page to start
    ...section(7, vec([[...str("memory"), 0x02, 0], [...str("dot_rows"), 0x00, 0], [...str("axpy_rows"), 0x00, 1]])),
    ...section(10, vec([[...leb(dotRowsBody.length), ...dotRowsBody], [...leb(axpyRowsBody.length), ...axpyRowsBody]]))
  ])

type Kernel = (a: number, b: number, rows: number, stride: number, len: number, out: number) => void


const PAGE = 65536
/** What a wasm32 memory can address: 65,536 pages of 64 KiB. */
export const KERNEL_MAX_BYTES = 65536 * PAGE

/**
 * The kernels and their memory. `alloc` hands out the decoder's permanent scratch; `allocRegion`
 * and `free` the KV caches, which come and go (free regions are reused by size). `f32()` is a view
 * of the whole memory, valid until the next allocation (which may grow the memory and detach old
 * views).
 */
export class AttentionKernel {
  readonly simd: boolean
  /** The most bytes the memory may grow to (wasm32's 4 GiB unless a smaller limit is asked for). */
  readonly maxBytes: number
  private readonly memory: WasmMemory
  /** out[r] = Σ_t a[t]·b[r·stride + t] for r < rows (byte addresses; len, stride multiples of 16). */
  readonly dotRows: Kernel
  /** out[t] = Σ_r a[r]·b[r·stride + t] for t < len/4 (byte addresses; len, stride multiples of 16). */
  readonly axpyRows: Kernel
  private view: Float32Array
  private top = 64 // bytes; offset 0 stays unused
  /** Where the regions begin: the permanent scratch lies below. */
  private base = 64
  private readonly freeBySize = new Map<number, Array<number>>()
  private liveRegions = 0

  constructor(options: { readonly simd?: boolean; readonly maxBytes?: number } = {}) {
    const bytes = kernelBytes()
    const simd = options.simd !== false && WebAssembly.validate(bytes)
    if (simd) {
      const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), {})
      this.memory = instance.exports["memory"] as WasmMemory
      this.dotRows = instance.exports["dot_rows"] as Kernel
      this.axpyRows = instance.exports["axpy_rows"] as Kernel
    } else {
      // Float indices with `>>> 2`: byte addresses above 2 GiB are negative as int32.
      this.memory = new WebAssembly.Memory({ initial: 1 })
      this.dotRows = (a, b, rows, stride, len, out) => jsDotRows(this.view, a >>> 2, b >>> 2, rows, stride >>> 2, len >>> 2, out >>> 2)
      this.axpyRows = (a, b, rows, stride, len, out) => jsAxpyRows(this.view, a >>> 2, b >>> 2, rows, stride >>> 2, len >>> 2, out >>> 2)
    }
    this.simd = simd
    this.maxBytes = Math.min(KERNEL_MAX_BYTES, options.maxBytes ?? KERNEL_MAX_BYTES)
    this.view = new Float32Array(this.memory.buffer)
  }

  /** A float32 view of the memory (refresh after an allocation). */
  f32(): Float32Array {
    if (this.view.buffer !== this.memory.buffer) this.view = new Float32Array(this.memory.buffer)
    return this.view
  }

  /** Reserves `floats` floats (16-byte aligned) for good; returns the byte offset. Before any region. */
  alloc(floats: number): number {
    if (this.top !== this.base) throw new Error("AttentionKernel: permanent allocations come before the first region")
    const offset = this.takeTop(regionBytes(floats))
    if (offset === undefined) throw new KernelMemoryFull(regionBytes(floats), this.maxBytes - this.top, this.maxBytes)
    this.base = this.top
    return offset
  }

  /** The largest region `allocRegion` can ever hand out, in bytes. */
  get regionLimit(): number {
    return this.maxBytes - this.base
  }

  /**
   * Reserves a region of `floats` floats, or returns undefined when the memory cannot hold it now:
   * no free region of its size and no room above the others. Once no region is live, every freed
   * one is forgotten and the space is handed out afresh, so a region up to `regionLimit` always
   * fits then.
   */
  allocRegion(floats: number): number | undefined {
    const bytes = regionBytes(floats)
    const reuse = this.freeBySize.get(bytes)
    let offset = reuse !== undefined && reuse.length > 0 ? reuse.pop()! : this.takeTop(bytes)
    if (offset === undefined && this.liveRegions === 0) {
      this.freeBySize.clear()
      this.top = this.base
      offset = this.takeTop(bytes)
    }
    if (offset !== undefined) this.liveRegions++
    return offset
  }

  free(offset: number, floats: number): void {
    const bytes = regionBytes(floats)
    let list = this.freeBySize.get(bytes)
    if (list === undefined) this.freeBySize.set(bytes, (list = []))
    list.push(offset)
    this.liveRegions--
  }

  /** `bytes` from the top, growing the memory; undefined (nothing changed) past `maxBytes`. */
  private takeTop(bytes: number): number | undefined {
    if (this.top + bytes > this.maxBytes) return undefined
    const needed = Math.ceil((this.top + bytes) / PAGE) - this.memory.buffer.byteLength / PAGE
    if (needed > 0) {
      try {
        this.memory.grow(needed)
      } catch {
        return undefined // the host would not commit the pages
      }
    }
    const offset = this.top
    this.top += bytes
    this.f32()
    return offset
  }
}

const regionBytes = (floats: number): number => Math.ceil((floats * 4) / 16) * 16

/** The kernel's memory cannot hold a permanent allocation. */
export class KernelMemoryFull extends Error {
  constructor(readonly bytes: number, readonly available: number, readonly limit: number) {
    super(`the attention kernel's memory cannot hold ${bytes} more bytes (${available} left of its ${limit} bytes)`)
  }
}

// The same two loops in JavaScript (float indices), where wasm SIMD is unavailable.
const jsDotRows = (m: Float32Array, a: number, b: number, rows: number, stride: number, len: number, out: number): void => {
  for (let r = 0; r < rows; r++) {
    const row = b + r * stride
    let s = 0
    for (let t = 0; t < len; t++) s += m[a + t]! * m[row + t]!
    m[out + r] = s
  }
}

const jsAxpyRows = (m: Float32Array, a: number, b: number, rows: number, stride: number, len: number, out: number): void => {
  m.fill(0, out, out + len)
  for (let r = 0; r < rows; r++) {
    const w = m[a + r]!
    const row = b + r * stride
    for (let t = 0; t < len; t++) m[out + t]! += w * m[row + t]!
  }
}
