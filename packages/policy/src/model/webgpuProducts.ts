/**
 * The products by a weight matrix of the WebGPU decode path (webgpuKernels.ts describes the
 * `info` buffer and the layouts): `linear` for the few rows of a decoding step, `tiledLinear` for
 * the many rows of a prompt or of many sequences. webgpuDecode.ts picks one per product per step.
 */
import { header } from "./webgpuKernels.js"

/** Whether a product adds to `out` (the residual) or writes it; which rows it covers (all, or the head's). */
export interface ProductOptions {
  readonly accumulate: boolean
  readonly rows: "info[0]" | "info[1]"
}

/** Both shaders' bindings: the step's info, activations a [M, K], weights W [N, K], bias, out [M, N]. */
const bindings = `${header}
@group(0) @binding(1) var<storage, read> a : array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W : array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias : array<f32>;
@group(0) @binding(4) var<storage, read_write> out : array<f32>;`

/** Rows of activations one `linear` workgroup multiplies by the weights it reads. */
export const LINEAR_ROW_TILE = 8
/** Output features per `linear` workgroup (64 lanes each). */
export const LINEAR_OUTPUTS = 4

/**
 * out[m, n] (+)= a[m]·W[n] + bias[n] for m < rows (info[0], or info[1] for the head): each of a
 * workgroup's 4 × 64 lanes reads a stride of one weight row as vec4s and multiplies it into up to
 * 8 rows of a; the lanes of a row are summed by a tree. Reading the weights dominates at the
 * batch sizes of decoding, and each weight is read once per 8 rows.
 */
export const linearShader = (K: number, N: number, options: ProductOptions) => {
  const K4 = K / 4
  const T = LINEAR_ROW_TILE
  return `${bindings}
var<workgroup> part : array<f32, ${256 * T}>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) t : u32, @builtin(workgroup_id) wid : vec3<u32>) {
  let lane = t % 64u;
  let n = wid.x * ${LINEAR_OUTPUTS}u + t / 64u;
  let m0 = wid.y * ${T}u;
  let M = ${options.rows};
  var acc : array<f32, ${T}>;
  if (n < ${N}u) {
    for (var k = lane; k < ${K4}u; k += 64u) {
      let w = W[n * ${K4}u + k];
      for (var i = 0u; i < ${T}u; i++) {
        if (m0 + i < M) { acc[i] += dot(w, a[(m0 + i) * ${K4}u + k]); }
      }
    }
  }
  for (var i = 0u; i < ${T}u; i++) { part[t * ${T}u + i] = acc[i]; }
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lane < s) {
      for (var i = 0u; i < ${T}u; i++) { part[t * ${T}u + i] += part[(t + s) * ${T}u + i]; }
    }
    workgroupBarrier();
  }
  if (lane < ${T}u && n < ${N}u && m0 + lane < M) {
    let v = part[(t - lane) * ${T}u + lane] + bias[n];
    let o = (m0 + lane) * ${N}u + n;
    out[o] = ${options.accumulate ? "out[o] + v" : "v"};
  }
}`
}

/** Rows × outputs of the tile one `tiledLinear` workgroup computes (16 × 16 threads, 4 × 4 each). */
export const TILE = 64

/**
 * `linear`'s product for many rows: a workgroup computes a 64 × 64 tile of out, each of its
 * 16 × 16 threads 4 rows × 4 outputs (strided by 16, so neighbouring threads read neighbouring
 * words), over K in slices of 16 staged in workgroup memory. Each weight is read once per 64 rows
 * instead of once per 8, and each value read from workgroup memory feeds four multiply-adds;
 * webgpuDecode.ts picks it where the step has rows enough to fill the device with tiles.
 */
export const tiledLinearShader = (K: number, N: number, options: ProductOptions) => {
  const K4 = K / 4
  return `${bindings}
var<workgroup> sa : array<array<f32, ${TILE}>, 16>;
var<workgroup> sw : array<array<f32, ${TILE}>, 16>;
@compute @workgroup_size(16, 16) fn main(@builtin(local_invocation_id) lid : vec3<u32>, @builtin(workgroup_id) wid : vec3<u32>) {
  let M = ${options.rows};
  let m0 = wid.y * ${TILE}u;
  let n0 = wid.x * ${TILE}u;
  // each thread stages one vec4 of a's slice and one of W's: row t / 4, k-vec4 t % 4
  let t = lid.y * 16u + lid.x;
  let lr = t / 4u;
  let lk = t % 4u;
  var acc : array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < ${K4}u; k0 += 4u) {
    var av = vec4<f32>(0.0);
    var wv = vec4<f32>(0.0);
    if (k0 + lk < ${K4}u) {
      if (m0 + lr < M) { av = a[(m0 + lr) * ${K4}u + k0 + lk]; }
      if (n0 + lr < ${N}u) { wv = W[(n0 + lr) * ${K4}u + k0 + lk]; }
    }
    for (var c = 0u; c < 4u; c++) {
      sa[lk * 4u + c][lr] = av[c];
      sw[lk * 4u + c][lr] = wv[c];
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      let w = vec4<f32>(sw[kk][lid.x], sw[kk][lid.x + 16u], sw[kk][lid.x + 32u], sw[kk][lid.x + 48u]);
      for (var i = 0u; i < 4u; i++) { acc[i] += sa[kk][lid.y + 16u * i] * w; }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + lid.y + 16u * i;
    for (var j = 0u; j < 4u; j++) {
      let n = n0 + lid.x + 16u * j;
      if (m < M && n < ${N}u) {
        let o = m * ${N}u + n;
        let v = acc[i][j] + bias[n];
        out[o] = ${options.accumulate ? "out[o] + v" : "v"};
      }
    }
  }
}`
}
