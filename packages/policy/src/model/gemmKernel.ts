/**
 * Dense products computed where tfjs's wasm backend keeps its tensors, W read in place, never
 * copied. tfjs's own matmul (XNNPACK) packs every right-hand matrix into a copy it caches per
 * tensor, so a model's weights are held twice; from ~0.5 B parameters (Qwen3-0.6B: 2.4 GB in F32)
 * that no longer fits the backend's 4 GiB heap. This is a tiny SIMD WebAssembly module that
 * imports the backend's memory and multiplies tensors by their byte offsets. Such a model holds
 * its matrices [out, in] (matrixLayout.ts), so its forward products are `x·Wᵀ`:
 *
 *   `heapGemmNtInto`   x·Wᵀ, W [out, in]. 4 rows or more: tiles of 4 rows of x by 2 rows of W
 *                      (`gemm_nt`, eight 4-float accumulators summed across lanes at the end),
 *                      blocked by 64 rows and 512 floats of the shared dimension; at Qwen3-0.6B's
 *                      shapes here ~15 GFLOP/s over 16 rows, ~24–26 over 64–256 (XNNPACK's
 *                      matmul: ~8, ~16–19). Single rows (decoding one sequence): x dotted with
 *                      each row of W in turn (`dot_rows`), W streamed once in order: ~21 GB/s
 *   `heapGemmInto`     x·W, W [in, out] — the training pass's `dy·Wᵀ` for W held [out, in]: tiles
 *                      of 4 rows by 8 columns (`gemm_4`), single rows as out += x[k]·W[k] eight
 *                      rows of W at a time (attentionKernel.ts's `axpy_rows`, ~16 GB/s)
 *
 * It is used only for models the packed copies do not fit: by the decoder (decodeWeights.ts) and
 * for the frozen weights of LoRA training (matmul.ts `heapProducts`, headLogprobs.ts);
 * test/policy/gemm-kernel.test.ts holds it to tfjs's matmul.
 */
import * as tf from "@tensorflow/tfjs"
import { axpyRowsBody, dotRowsBody } from "./attentionKernel.js"
import type { ModelConfig } from "./config.js"
import { wasmPacksWeights } from "./memory.js"
import {
  BR_IF_0, END, F32_ADD, F32X4_ADD, F32X4_MUL, F32X4_SPLAT, f32Load, f32Store, GET, HEADER, I32, I32_ADD, I32_LT_U, I32_MUL, I32_SHL, i32, lane, leb,
  LOOP, section, SET, str, TEE, V128, V128_ZERO, v128Load, v128Store, vec, VOID, voidType
} from "./wasmAssembly.js"
import { heapFloats, heapModule, heapOffset } from "./heap.js"

/** Columns of W per tile: two 4-float vectors. */
const NR = 8
/** Rows of the shared dimension per block: 256 × 32 bytes of W per tile, in L1 across a column of tiles. */
const K_BLOCK = 256
/** Columns per block of a single row's product: 16 KiB of out, in L1 while eight rows of W stream past. */
const ROW_BLOCK = 4096

// Parameters (byte addresses and byte strides): x, w, rows, k, cols, out, x's row stride, w's, out's.
const [X, W, ROWS, K, COLS, OUT, XS, WS, OS] = [0, 1, 2, 3, 4, 5, 6, 7, 8]
const I = 9, J = 10, KK = 11, WP = 12, XP = 13, OP = 14
const I32_LOCALS = 6

/**
 * out[i, j] += Σ_k x[i, k]·w[k, j] for rows a multiple of `mr` and cols a multiple of 8: for each
 * panel of 8 columns, for each tile of `mr` rows, the accumulators start from out, gather the
 * products over k (W's 8 floats at row k as two vectors, x's value splat), and go back to out.
 */
const gemmBody = (mr: number): Array<number> => {
  const acc = Array.from({ length: mr * 2 }, (_, i) => OP + 1 + i)
  const [b0, b1, a] = [OP + 1 + mr * 2, OP + 2 + mr * 2, OP + 3 + mr * 2]
  const rowAt = (base: number, stride: number, r: number) => (r === 0 ? [GET, base] : [GET, base, GET, stride, ...i32(r), I32_MUL, I32_ADD])
  return [
    ...vec([[I32_LOCALS, I32], [mr * 2 + 3, V128]]),
    ...i32(0), SET, J,
    LOOP, VOID,
    ...i32(0), SET, I,
    LOOP, VOID,
    // OP = out + i·os + j·4; accumulators from out.
    GET, OUT, GET, I, GET, OS, I32_MUL, I32_ADD, GET, J, ...i32(2), I32_SHL, I32_ADD, SET, OP,
    ...Array.from({ length: mr }, (_, r) => [
      ...rowAt(OP, OS, r), ...v128Load(0), SET, acc[2 * r]!,
      ...rowAt(OP, OS, r), ...v128Load(16), SET, acc[2 * r + 1]!
    ]).flat(),
    GET, W, GET, J, ...i32(2), I32_SHL, I32_ADD, SET, WP,
    GET, X, GET, I, GET, XS, I32_MUL, I32_ADD, SET, XP,
    GET, K, SET, KK,
    LOOP, VOID,
    GET, WP, ...v128Load(0), SET, b0,
    GET, WP, ...v128Load(16), SET, b1,
    ...Array.from({ length: mr }, (_, r) => [
      ...rowAt(XP, XS, r), ...f32Load(0), ...F32X4_SPLAT, SET, a,
      GET, acc[2 * r]!, GET, a, GET, b0, ...F32X4_MUL, ...F32X4_ADD, SET, acc[2 * r]!,
      GET, acc[2 * r + 1]!, GET, a, GET, b1, ...F32X4_MUL, ...F32X4_ADD, SET, acc[2 * r + 1]!
    ]).flat(),
    GET, WP, GET, WS, I32_ADD, SET, WP,
    GET, XP, ...i32(4), I32_ADD, SET, XP,
    GET, KK, ...i32(-1), I32_ADD, TEE, KK, ...BR_IF_0,
    END,
    ...Array.from({ length: mr }, (_, r) => [
      ...rowAt(OP, OS, r), GET, acc[2 * r]!, ...v128Store(0),
      ...rowAt(OP, OS, r), GET, acc[2 * r + 1]!, ...v128Store(16)
    ]).flat(),
    GET, I, ...i32(mr), I32_ADD, TEE, I, GET, ROWS, I32_LT_U, ...BR_IF_0,
    END,
    GET, J, ...i32(NR), I32_ADD, TEE, J, GET, COLS, I32_LT_U, ...BR_IF_0,
    END,
    END
  ]
}

/** Rows of x per tile, in both tiled products (fewer are single rows, one pass over W each). */
const MR = 4

/** Rows of W (stored [out, in]) per tile of `gemm_nt`: 4 rows of x by 2 of W, eight accumulators. */
const NT_COLS = 2

/**
 * out[i, j] += Σ_t x[i, t]·w[j, t] for W stored [out, in] (`k` in bytes here, a multiple of 16;
 * rows a multiple of 4, cols of 2): for each pair of W's rows, for each tile of 4 rows of x, eight
 * 4-float accumulators over the shared dimension (two loads of W, four of x per step), summed
 * across their lanes into out at the end.
 */
const gemmNtBody = (): Array<number> => {
  const [W0, W1, X0, OP2] = [I + 3, I + 4, I + 5, I + 9]
  const acc = (r: number, c: number) => OP2 + 1 + r * NT_COLS + c
  const [b0, b1, xv] = [OP2 + 9, OP2 + 10, OP2 + 11]
  const plus = (base: number, stride: number, r: number) => (r === 0 ? [GET, base] : [GET, base, GET, stride, ...i32(r), I32_MUL, I32_ADD])
  const lanesSum = (v: number) => [GET, v, ...lane(0), GET, v, ...lane(1), F32_ADD, GET, v, ...lane(2), F32_ADD, GET, v, ...lane(3), F32_ADD]
  return [
    ...vec([[10, I32], [11, V128]]), // I, J, KK (byte offset along the shared dimension), W0, W1, X0..X3, OP; accumulators, b0, b1, xv
    ...i32(0), SET, J,
    LOOP, VOID,
    GET, W, GET, J, GET, WS, I32_MUL, I32_ADD, TEE, W0, GET, WS, I32_ADD, SET, W1,
    ...i32(0), SET, I,
    LOOP, VOID,
    // X0 = x + i·xs, the tile's row r at X0 + r·xs.
    GET, X, GET, I, GET, XS, I32_MUL, I32_ADD, SET, X0,
    ...Array.from({ length: MR - 1 }, (_, r) => [...plus(X0, XS, r + 1), SET, X0 + r + 1]).flat(),
    ...Array.from({ length: MR * NT_COLS }, (_, a) => [...V128_ZERO, SET, OP2 + 1 + a]).flat(),
    ...i32(0), SET, KK,
    LOOP, VOID,
    GET, W0, GET, KK, I32_ADD, ...v128Load(0), SET, b0,
    GET, W1, GET, KK, I32_ADD, ...v128Load(0), SET, b1,
    ...Array.from({ length: MR }, (_, r) => [
      GET, X0 + r, GET, KK, I32_ADD, ...v128Load(0), SET, xv,
      GET, acc(r, 0), GET, xv, GET, b0, ...F32X4_MUL, ...F32X4_ADD, SET, acc(r, 0),
      GET, acc(r, 1), GET, xv, GET, b1, ...F32X4_MUL, ...F32X4_ADD, SET, acc(r, 1)
    ]).flat(),
    GET, KK, ...i32(16), I32_ADD, TEE, KK, GET, K, I32_LT_U, ...BR_IF_0,
    END,
    // OP = out + i·os + j·4; out[i + r, j + c] += the lanes of acc(r, c).
    GET, OUT, GET, I, GET, OS, I32_MUL, I32_ADD, GET, J, ...i32(2), I32_SHL, I32_ADD, SET, OP2,
    ...Array.from({ length: MR }, (_, r) =>
      Array.from({ length: NT_COLS }, (_, c) => [...plus(OP2, OS, r), ...plus(OP2, OS, r), ...f32Load(c * 4), ...lanesSum(acc(r, c)), F32_ADD, ...f32Store(c * 4)]).flat()
    ).flat(),
    GET, I, ...i32(MR), I32_ADD, TEE, I, GET, ROWS, I32_LT_U, ...BR_IF_0,
    END,
    GET, J, ...i32(NT_COLS), I32_ADD, TEE, J, GET, COLS, I32_LT_U, ...BR_IF_0,
    END,
    END
  ]
}

const kernelBytes = (): Uint8Array => {
  const bodies = [gemmBody(MR), axpyRowsBody, dotRowsBody, gemmNtBody()]
  return new Uint8Array([
    ...HEADER,
    ...section(1, vec([voidType(9), voidType(6)])),
    ...section(2, vec([[...str("env"), ...str("memory"), 0x02, 0x00, 1]])), // the backend's memory, imported
    ...section(3, vec([[0], [1], [1], [0]])),
    ...section(7, vec([[...str("gemm_4"), 0x00, 0], [...str("axpy_rows"), 0x00, 1], [...str("dot_rows"), 0x00, 2], [...str("gemm_nt"), 0x00, 3]])),
    ...section(10, vec(bodies.map((b) => [...leb(b.length), ...b])))
  ])
}

type Gemm = (x: number, w: number, rows: number, k: number, cols: number, out: number, xs: number, ws: number, os: number) => void
/** out[t] = Σ_r a[r]·b[r·stride + t] for t < len/4 (out zeroed first; byte addresses, len a multiple of 16). */
type AxpyRows = (a: number, b: number, rows: number, stride: number, len: number, out: number) => void
/** out[r] = Σ_t a[t]·b[r·stride + t] for r < rows (byte addresses; len and stride multiples of 16). */
type DotRows = AxpyRows

interface Kernel {
  readonly gemm4: Gemm
  readonly gemmNt: Gemm
  readonly axpyRows: AxpyRows
  readonly dotRows: DotRows
}

const exportsOnHeap = heapModule(kernelBytes)

/** The kernel bound to the current wasm backend's memory; null where wasm SIMD or that memory is missing. */
const kernel = (): Kernel | null => {
  const e = exportsOnHeap()
  return e === null ? null : { gemm4: e["gemm_4"] as Gemm, gemmNt: e["gemm_nt"] as Gemm, axpyRows: e["axpy_rows"] as AxpyRows, dotRows: e["dot_rows"] as DotRows }
}

/** Whether in-place products can run here (the wasm backend, with SIMD). */
export const heapGemmAvailable = (): boolean => kernel() !== null

/**
 * Whether `config`'s weights are multiplied in place, here: on wasm where XNNPACK's packed copies
 * would not fit (memory.ts `wasmPacksWeights`) — the decoder's products and LoRA training's alike.
 */
export const multipliesInPlace = (config: ModelConfig): boolean => tf.getBackend() === "wasm" && !wasmPacksWeights(config) && heapGemmAvailable()

const offsetOf = (t: tf.Tensor): number => {
  try {
    return heapOffset(t)
  } catch {
    throw new Error("heapGemm: a tensor that is not on the wasm backend")
  }
}

const boundKernel = (name: string) => {
  const kern = kernel()
  if (kern === null) throw new Error(`${name}: needs the wasm backend with SIMD`)
  return kern
}

/** x [R, k] times a matrix of `cols` output columns (`inner`: its k agrees) into out [R, cols], or out's columns from `column` on. */
const checkShapes = (name: string, x: tf.Tensor2D, w: tf.Tensor2D, out: tf.Tensor2D, inner: boolean, cols: number, column: number | undefined) => {
  const [width, c0] = [out.shape[1], column ?? 0]
  if (!inner || out.shape[0] !== x.shape[0] || (column === undefined ? width !== cols : c0 < 0 || c0 + cols > width)) {
    throw new Error(`${name}: shapes [${x.shape}] and [${w.shape}] do not multiply into [${out.shape}]${column === undefined ? "" : ` at column ${column}`}`)
  }
}

/** `x·w` ([R, k]·[k, m] → [R, m]) with w read in place on the wasm backend's heap. */
export const heapGemm = (x: tf.Tensor2D, w: tf.Tensor2D): tf.Tensor2D => {
  const out = tf.zeros([x.shape[0], w.shape[1]]) as tf.Tensor2D
  heapGemmInto(x, w, out)
  return out
}

/**
 * `x·w` into `out` (a tensor the caller keeps, to spare an allocation per product): all of it
 * [R, m], overwritten; or with `column`, the m columns of a wider out [R, width] from there on
 * (the rest of out left as it is), as `heapGemmNtInto` writes q, k and v side by side.
 */
export const heapGemmInto = (x: tf.Tensor2D, w: tf.Tensor2D, out: tf.Tensor2D, column?: number): void => {
  const kern = boundKernel("heapGemm")
  const [rows, k] = x.shape
  const [kw, cols] = w.shape
  const width = out.shape[1]
  const c0 = column ?? 0
  checkShapes("heapGemm", x, w, out, k === kw, cols, column)
  // Offsets are stable (the kernel allocates nothing, and a tensor's memory never moves).
  const xo = offsetOf(x), wo = offsetOf(w), oo = offsetOf(out) + c0 * 4
  const full = rows - (rows % MR)
  // Whole 8-column panels for the tiles, whole 4-float groups for single rows; a JS loop for the rest.
  const panels = cols - (cols % NR)
  const quads = cols - (cols % 4)
  if (full > 0 && panels > 0) {
    // The tiles accumulate into out: zero it first (in one run when the columns are all of it).
    const heap = heapFloats()
    if (width === cols) heap.fill(0, oo >>> 2, (oo >>> 2) + full * cols)
    else for (let i = 0; i < full; i++) heap.fill(0, (oo >>> 2) + i * width, (oo >>> 2) + i * width + panels)
    for (let k0 = 0; k0 < k; k0 += K_BLOCK) {
      kern.gemm4(xo + k0 * 4, wo + k0 * cols * 4, full, Math.min(K_BLOCK, k - k0), panels, oo, k * 4, cols * 4, width * 4)
    }
  }
  for (let i = full; i < rows; i++) {
    for (let j = 0; j < quads; j += ROW_BLOCK) {
      kern.axpyRows(xo + i * k * 4, wo + j * 4, k, cols * 4, Math.min(ROW_BLOCK, quads - j) * 4, oo + (i * width + j) * 4)
    }
  }
  const heap = heapFloats()
  const rest = (i0: number, i1: number, j0: number) => {
    for (let i = i0; i < i1; i++) {
      for (let j = j0; j < cols; j++) {
        let s = 0
        for (let t = 0; t < k; t++) s += heap[(xo >>> 2) + i * k + t]! * heap[(wo >>> 2) + t * cols + j]!
        heap[(oo >>> 2) + i * width + j] = s
      }
    }
  }
  rest(0, full, full > 0 && panels > 0 ? panels : 0) // tile rows: columns past the last panel
  rest(full, rows, quads) // single rows: columns past the last 4-float group
}

/** Rows of x per block of `heapGemmNtInto`: their slice of the shared dimension (below, 128 KiB) stays in L2 while W's rows pass. */
const NT_ROW_BLOCK = 64
/** Floats of the shared dimension per block: a pair of W's rows' slice (4 KiB) stays in L1 across the block's tiles. */
const NT_K_BLOCK = 512

/** `x·wᵀ` ([R, k]·[m, k]ᵀ → [R, m]) with w stored [out, in], read in place on the wasm backend's heap. */
export const heapGemmNt = (x: tf.Tensor2D, w: tf.Tensor2D): tf.Tensor2D => {
  const out = tf.zeros([x.shape[0], w.shape[0]]) as tf.Tensor2D
  heapGemmNtInto(x, w, out)
  return out
}

/**
 * `x·wᵀ` into `out` for `w` stored [out, in], as Hugging Face stores a linear layer (and as an
 * embedding table is a tied head): overwrites out [R, m], or with `column` its m columns from
 * there on. Four rows or more go in tiles of 4 rows by 2 of w (`gemm_nt`), blocked so w streams
 * from memory once per 64 rows; the rows left over (all of them when decoding one sequence) are
 * dotted with each row of w in turn (`dot_rows`): w streams once per row, in order, ~1.3x faster
 * here than one row's pass over [in, out] (`heapGemmInto`).
 */
export const heapGemmNtInto = (x: tf.Tensor2D, w: tf.Tensor2D, out: tf.Tensor2D, column?: number): void => {
  const kern = boundKernel("heapGemmNt")
  const [rows, k] = x.shape
  const [cols, kw] = w.shape
  const width = out.shape[1]
  checkShapes("heapGemmNt", x, w, out, k === kw, cols, column)
  const xo = offsetOf(x), wo = offsetOf(w), oo = offsetOf(out) + (column ?? 0) * 4
  const heap = heapFloats()
  if (k % 4 !== 0) {
    // Rows that are not whole vectors (no model's hidden size): a JS loop.
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        let s = 0
        for (let t = 0; t < k; t++) s += heap[(xo >>> 2) + i * k + t]! * heap[(wo >>> 2) + j * k + t]!
        heap[(oo >>> 2) + i * width + j] = s
      }
    }
    return
  }
  const full = rows - (rows % MR)
  const pairs = cols - (cols % NT_COLS)
  if (full > 0 && pairs > 0) {
    // The tiles accumulate into out: zero it first (in one run when the columns are all of it).
    if (width === pairs) heap.fill(0, oo >>> 2, (oo >>> 2) + full * width)
    else for (let i = 0; i < full; i++) heap.fill(0, (oo >>> 2) + i * width, (oo >>> 2) + i * width + pairs)
    for (let i0 = 0; i0 < full; i0 += NT_ROW_BLOCK) {
      for (let k0 = 0; k0 < k; k0 += NT_K_BLOCK) {
        const n = Math.min(NT_ROW_BLOCK, full - i0)
        kern.gemmNt(xo + (i0 * k + k0) * 4, wo + k0 * 4, n, Math.min(NT_K_BLOCK, k - k0) * 4, pairs, oo + i0 * width * 4, k * 4, k * 4, width * 4)
      }
    }
  }
  // Rows past the tiles: every column; tile rows: a last column past the pairs.
  for (let i = full; i < rows; i++) kern.dotRows(xo + i * k * 4, wo, cols, k * 4, k * 4, oo + i * width * 4)
  if (full > 0 && pairs < cols) {
    for (let i = 0; i < full; i++) kern.dotRows(xo + i * k * 4, wo + pairs * k * 4, cols - pairs, k * 4, k * 4, oo + (i * width + pairs) * 4)
  }
}
