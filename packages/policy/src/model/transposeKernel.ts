/**
 * A transpose written straight into the wasm heap with 128-bit SIMD: how the loader turns a
 * checkpoint's [out, in] matrices into the [in, out] a model multiplied by tfjs holds
 * (matrixLayout.ts), since XNNPACK's matmul is fast only for that layout. Most of such a load is
 * this transpose: SmolLM2-135M turns 425 MB of its 540. Into fresh pages, alone, the JS loop
 * (transpose.ts) moved ~0.9 GB/s here and this kernel 1.3–1.9 GB/s, counting the copy of each chunk
 * into the heap first (a module reads only its own memory), close to what the first touch of those
 * pages allows (~2.2 GB/s); in the loader, beside the reads and the checksum thread, 0.24–0.46 s
 * for those 425 MB against 0.33–0.57 s (interleaved scratch loads on a noisy host).
 *
 * `transpose_4x8` takes a block of 4 rows by 8 columns as eight vectors, transposes each 4×4
 * half with eight shuffles and stores eight vectors, one into each of 8 destination rows: 8
 * sequential write streams, each source row read in passes of 32 bytes.
 */
import type * as tf from "@tensorflow/tfjs"
import { heapFloats, heapModule, heapOffset, uninitialized, view } from "./heap.js"
import { transposeInto } from "./transpose.js"
import {
  BR_IF_0, END, f32x4Shuffle, GET, HEADER, I32, I32_ADD, I32_LT_U, I32_MUL, I32_SHL, i32, leb, LOOP, section, SET, str, TEE, V128, v128Load,
  v128Store, vec, VOID, voidType
} from "./wasmAssembly.js"

/** Columns of the source per pass (two 4×4 blocks). */
const COLS = 8
// Parameters (byte addresses and strides): src, dst, rows, cols, src's row stride, dst's; locals: i, j, src and dst pointers.
const [SRC, DST, ROWS, C, SS, DS, I, J, SP, DP] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
/** v128 locals: the block's rows (g: which 4-column half, r: row), then four shuffled pairs. */
const row = (g: number, r: number) => 10 + g * 4 + r
const pair = (k: number) => 18 + k

/** dst + j·ds + i·4 ← src + i·ss + j·4 for i < rows (a multiple of 4), j < cols (a multiple of 8). */
const transposeBody = (): Array<number> => {
  const plus = (base: number, stride: number, k: number) => (k === 0 ? [GET, base] : [GET, base, GET, stride, ...i32(k), I32_MUL, I32_ADD])
  const half = (g: number) => [
    // pair 0 = r0[0] r1[0] r0[1] r1[1], pair 1 = r0[2] r1[2] r0[3] r1[3]; pairs 2, 3 likewise of rows 2, 3.
    GET, row(g, 0), GET, row(g, 1), ...f32x4Shuffle([0, 4, 1, 5]), SET, pair(0),
    GET, row(g, 0), GET, row(g, 1), ...f32x4Shuffle([2, 6, 3, 7]), SET, pair(1),
    GET, row(g, 2), GET, row(g, 3), ...f32x4Shuffle([0, 4, 1, 5]), SET, pair(2),
    GET, row(g, 2), GET, row(g, 3), ...f32x4Shuffle([2, 6, 3, 7]), SET, pair(3),
    // Column c of the block: rows 0-3 of it, into destination row 4g + c.
    ...[[0, 2, [0, 1, 4, 5]], [0, 2, [2, 3, 6, 7]], [1, 3, [0, 1, 4, 5]], [1, 3, [2, 3, 6, 7]]].flatMap(([a, b, lanes], c) => [
      ...plus(DP, DS, 4 * g + c), GET, pair(a as number), GET, pair(b as number), ...f32x4Shuffle(lanes as [number, number, number, number]), ...v128Store(0)
    ])
  ]
  return [
    ...vec([[4, I32], [12, V128]]),
    ...i32(0), SET, J,
    LOOP, VOID,
    GET, SRC, GET, J, ...i32(2), I32_SHL, I32_ADD, SET, SP,
    GET, DST, GET, J, GET, DS, I32_MUL, I32_ADD, SET, DP,
    ...i32(0), SET, I,
    LOOP, VOID,
    ...[0, 1, 2, 3].flatMap((r) => [0, 1].flatMap((g) => [...plus(SP, SS, r), ...v128Load(16 * g), SET, row(g, r)])),
    ...half(0),
    ...half(1),
    GET, SP, GET, SS, ...i32(2), I32_SHL, I32_ADD, SET, SP,
    GET, DP, ...i32(16), I32_ADD, SET, DP,
    GET, I, ...i32(4), I32_ADD, TEE, I, GET, ROWS, I32_LT_U, ...BR_IF_0,
    END,
    GET, J, ...i32(COLS), I32_ADD, TEE, J, GET, C, I32_LT_U, ...BR_IF_0,
    END,
    END
  ]
}

const kernelBytes = (): Uint8Array => {
  const body = transposeBody()
  return new Uint8Array([
    ...HEADER,
    ...section(1, vec([voidType(6)])),
    ...section(2, vec([[...str("env"), ...str("memory"), 0x02, 0x00, 1]])), // the backend's memory, imported
    ...section(3, vec([[0]])),
    ...section(7, vec([[...str("transpose_4x8"), 0x00, 0]])),
    ...section(10, vec([[...leb(body.length), ...body]]))
  ])
}

type Transpose = (src: number, dst: number, rows: number, cols: number, ss: number, ds: number) => void

const exportsOnHeap = heapModule(kernelBytes)

/**
 * `transposeInto` (transpose.ts) with destinations on the wasm backend, for one load: the source
 * has to be in the heap too (a module reads only its own memory), so each call copies it into a
 * scratch tensor kept from one call to the next — a fresh one per call would be first-touched
 * every time, which cost as much as the transpose. `dispose` frees the scratch.
 */
export class HeapTransposer {
  private scratch: tf.Tensor | undefined

  /** Whether the kernel runs here (the wasm backend, with SIMD); elsewhere `into` is the JS loop. */
  static get available(): boolean {
    return exportsOnHeap() !== null
  }

  /**
   * `out`'s element j·stride + offset + i ← `src[i·c + j]`, for `src` a row-major [r, c]: blocks
   * of 4×8 by the kernel, the rows and columns past the last whole block by a JS loop; all of it
   * by `transposeInto` where the kernel cannot run (another backend, no wasm SIMD).
   */
  into(src: Float32Array, out: tf.Tensor, r: number, c: number, stride = r, offset = 0): void {
    // A write past `out` would corrupt whatever the heap holds there.
    if (offset < 0 || offset + r > stride || c * stride > out.size) {
      throw new Error(`HeapTransposer.into: [${r}, ${c}] transposed into rows of ${stride} from ${offset} does not fit a tensor of ${out.size}`)
    }
    const kernel = exportsOnHeap()?.["transpose_4x8"] as Transpose | undefined
    if (kernel === undefined) {
      transposeInto(src, view(out), r, c, stride, offset)
      return
    }
    if (this.scratch === undefined || this.scratch.size < r * c) {
      this.scratch?.dispose()
      this.scratch = uninitialized([r * c])
    }
    view(this.scratch).set(src.subarray(0, r * c))
    const rows = r - (r % 4)
    const cols = c - (c % COLS)
    const at = heapOffset(out) + offset * 4
    if (rows > 0 && cols > 0) kernel(heapOffset(this.scratch), at, rows, cols, c * 4, stride * 4)
    const heap = heapFloats()
    const o = at >>> 2
    for (let i = 0; i < r; i++) {
      // Rows of whole blocks: only the columns past them; the last rows: every column.
      for (let j = i < rows ? cols : 0; j < c; j++) heap[o + j * stride + i] = src[i * c + j]!
    }
  }

  dispose(): void {
    this.scratch?.dispose()
    this.scratch = undefined
  }
}
