/**
 * Helpers for the hand-assembled WebAssembly kernels (attentionKernel.ts, gemmKernel.ts): byte
 * encodings, the opcodes they use, and the parts of the WebAssembly JS API they call. Why bytes
 * and not a .wasm file: each kernel is a few dozen instructions, and a build step for it would be
 * a toolchain (see attentionKernel.ts).
 */

/** Unsigned LEB128. */
export const leb = (n: number): Array<number> => {
  const out: Array<number> = []
  do {
    let b = n & 0x7f
    n >>>= 7
    if (n !== 0) b |= 0x80
    out.push(b)
  } while (n !== 0)
  return out
}

/** Signed LEB128 (for i32.const). */
export const sleb = (n: number): Array<number> => {
  const out: Array<number> = []
  for (;;) {
    const b = n & 0x7f
    n >>= 7
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) return [...out, b]
    out.push(b | 0x80)
  }
}

export const str = (s: string) => [...leb(s.length), ...new TextEncoder().encode(s)]
export const section = (id: number, body: Array<number>) => [id, ...leb(body.length), ...body]
export const vec = (items: Array<Array<number>>) => [...leb(items.length), ...items.flat()]

/** A module's first 8 bytes: magic and version. */
export const HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]

// Control, locals, i32.
export const BLOCK = 0x02, LOOP = 0x03, END = 0x0b, BR = 0x0c, BR_IF = 0x0d, VOID = 0x40
export const GET = 0x20, SET = 0x21, TEE = 0x22
export const I32 = 0x7f, V128 = 0x7b
export const I32_CONST = 0x41, I32_ADD = 0x6a, I32_MUL = 0x6c, I32_SHL = 0x74, I32_LT_U = 0x49, I32_GT_U = 0x4b, I32_EQZ = 0x45
export const BR_IF_0 = [0x0d, 0]
export const i32 = (v: number) => [I32_CONST, ...sleb(v)]
// Memory (align 2^2 for f32, 2^4 for v128; `offset` a constant byte offset).
export const F32_LOAD = [0x2a, 2, 0], F32_STORE = [0x38, 2, 0], F32_ADD = 0x92
export const f32Load = (offset = 0) => [0x2a, 2, ...leb(offset)]
export const f32Store = (offset = 0) => [0x38, 2, ...leb(offset)]
// SIMD.
export const SIMD = 0xfd
export const V128_LOAD = [SIMD, 0x00, 2, 0], V128_STORE = [SIMD, 0x0b, 2, 0]
export const v128Load = (offset = 0) => [SIMD, 0x00, 4, ...leb(offset)]
export const v128Store = (offset = 0) => [SIMD, 0x0b, 4, ...leb(offset)]
export const V128_ZERO = [SIMD, 0x0c, ...new Array<number>(16).fill(0)]
export const F32X4_SPLAT = [SIMD, 0x13], F32X4_ADD = [SIMD, ...leb(0xe4)], F32X4_MUL = [SIMD, ...leb(0xe6)]
export const lane = (i: number) => [SIMD, 0x1f, i]
/** i8x16.shuffle picking four floats: lanes 0-3 of the first operand, 4-7 of the second. */
export const f32x4Shuffle = (lanes: readonly [number, number, number, number]) => [SIMD, 0x0d, ...lanes.flatMap((l) => [4 * l, 4 * l + 1, 4 * l + 2, 4 * l + 3])]

/** A function type (params, all i32 here) → (). */
export const voidType = (params: number) => [0x60, ...vec(Array.from({ length: params }, () => [I32])), 0]

// The parts of the WebAssembly JS API the kernels use (TypeScript's "dom" lib is not loaded).
export interface WasmMemory {
  readonly buffer: ArrayBuffer
  grow(pages: number): number
}
interface WasmApi {
  validate(bytes: Uint8Array): boolean
  Module: new (bytes: Uint8Array) => object
  Instance: new (module: object, imports: object) => { readonly exports: Record<string, unknown> }
  Memory: new (descriptor: { initial: number }) => WasmMemory
}
export const WebAssembly = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly
