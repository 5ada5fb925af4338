/**
 * The decode path's small ops, fused on WebGPU (tensorDecode.ts). There each tfjs op costs tens
 * of microseconds to queue (46.7 µs measured on an H200, bench/gpu), and a decoding step of a
 * 28-layer model ran ~1,700 of them: the step's time was the queuing, not the arithmetic. Each op
 * here is one compute shader where tfjs takes three to six, run through the backend's own
 * program runner; elsewhere (and in the tests here, which have no WebGPU) it is the same
 * arithmetic as plain tfjs ops. The GPU check compares the engine's tokens on WebGPU with wasm's.
 *
 *   rmsNorm    x·rsqrt(mean(x²) + ε)·w over the last axis: one workgroup per row
 *   rope       x·cos + rotateHalf(x)·sin over every head, cos/sin given per row
 *   swiglu     silu(g)·u
 *   writeRows  rows of a KV pool replaced in place (tfjs would copy the whole pool)
 */
import * as tf from "@tensorflow/tfjs"

/** The piece of tfjs's WebGPU backend used here: run a program, into a new output or a given one. */
interface WebgpuBackend {
  runWebGPUProgram(program: object, inputs: Array<tf.TensorInfo>, outputDtype: tf.DataType, uniforms?: Array<{ type: string; data: Array<number> }>, output?: tf.TensorInfo): tf.TensorInfo
}

const WORKGROUP = 64

const onWebgpu = () => tf.getBackend() === "webgpu"

/**
 * Runs a program on the WebGPU backend: `code` is the body of `main`, over the flat output
 * index `index` (one invocation per element unless `workgroups` says how many groups of 64).
 */
const run = (
  key: string,
  inputs: ReadonlyArray<readonly [string, tf.Tensor]>,
  outputShape: ReadonlyArray<number>,
  options: { readonly uniforms?: ReadonlyArray<readonly [string, "int32" | "float32", number]>; readonly code: string; readonly prelude?: string; readonly workgroups?: number; readonly into?: tf.Tensor }
): tf.TensorInfo => {
  const elements = outputShape.reduce((a, b) => a * b, 1)
  const uniforms = options.uniforms ?? []
  const program = {
    variableNames: inputs.map(([name]) => name),
    outputShape: [...outputShape],
    shaderKey: `reins_${key}`,
    workgroupSize: [WORKGROUP, 1, 1],
    dispatchLayout: { x: [0] },
    dispatch: [options.workgroups ?? Math.ceil(elements / WORKGROUP), 1, 1],
    uniforms: uniforms.map(([name, type]) => `${name} : ${type === "int32" ? "i32" : "f32"},`).join(" "),
    getUserCode: () => `${options.prelude ?? ""}
      fn main(index : i32) {
        ${options.code}
      }`
  }
  const values = uniforms.map(([, type, value]) => ({ type, data: [value] }))
  return (tf.backend() as unknown as WebgpuBackend).runWebGPUProgram(program, inputs.map(([, t]) => t), "float32", values, options.into)
}

const tensorOf = <T extends tf.Tensor>(info: tf.TensorInfo): T => tf.engine().makeTensorFromTensorInfo(info) as T

/** RMSNorm over the last axis of x [n, d], scaled by w [d]. */
export const rmsNorm = (x: tf.Tensor2D, w: tf.Tensor, eps: tf.Scalar, epsValue: number): tf.Tensor2D => {
  if (!onWebgpu()) return tf.mul(tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps))), w)
  const [n, d] = x.shape
  // One workgroup per row: each lane sums a stride of the row's squares, a tree sums the lanes.
  // Barriers sit in uniform control flow: only the final writes depend on the row being real.
  const info = run("rmsnorm", [["x", x], ["w", w]], [n, d], {
    uniforms: [["rows", "int32", n], ["width", "int32", d], ["eps", "float32", epsValue]],
    workgroups: n,
    prelude: `var<workgroup> partial : array<f32, ${WORKGROUP}>;`,
    code: `
        let row = min(i32(workgroupId.x), uniforms.rows - 1);
        let lane = i32(localId.x);
        let at = row * uniforms.width;
        var s = 0.0;
        for (var j = lane; j < uniforms.width; j = j + ${WORKGROUP}) {
          let v = x[at + j];
          s = s + v * v;
        }
        partial[lane] = s;
        workgroupBarrier();
        for (var stride = ${WORKGROUP / 2}; stride > 0; stride = stride / 2) {
          if (lane < stride) {
            partial[lane] = partial[lane] + partial[lane + stride];
          }
          workgroupBarrier();
        }
        let r = inverseSqrt(partial[0] / f32(uniforms.width) + uniforms.eps);
        if (i32(workgroupId.x) < uniforms.rows) {
          for (var j = lane; j < uniforms.width; j = j + ${WORKGROUP}) {
            result[at + j] = x[at + j] * r * w[j];
          }
        }`
  })
  return tensorOf(info)
}

/**
 * The rotary embedding of x [n, heads·hd] by the cos and sin of each row's position, [n, hd/2]
 * each: x·cos + rotateHalf(x)·sin, rotateHalf(x) = (−x₂, x₁) over the two halves of every head.
 */
export const rope = (x: tf.Tensor2D, cos: tf.Tensor2D, sin: tf.Tensor2D, sign: tf.Tensor4D): tf.Tensor2D => {
  const [n, width] = x.shape
  const half = cos.shape[1]
  if (!onWebgpu()) {
    const pairs = tf.reshape(x, [n, width / (2 * half), 2, half])
    const c = tf.reshape(cos, [n, 1, 1, half])
    const s = tf.reshape(sin, [n, 1, 1, half])
    return tf.reshape(tf.add(tf.mul(pairs, c), tf.mul(tf.mul(tf.reverse(pairs, 2), sign), s)), [n, width])
  }
  const info = run("rope", [["x", x], ["cosT", cos], ["sinT", sin]], [n, width], {
    uniforms: [["size", "int32", n * width], ["width", "int32", width], ["half", "int32", half]],
    code: `
        if (index < uniforms.size) {
          let row = index / uniforms.width;
          let inHead = (index - row * uniforms.width) % (2 * uniforms.half);
          var i = inHead;
          var partner = 0.0;
          if (inHead < uniforms.half) {
            partner = -x[index + uniforms.half];
          } else {
            i = inHead - uniforms.half;
            partner = x[index - uniforms.half];
          }
          let at = row * uniforms.half + i;
          result[index] = x[index] * cosT[at] + partner * sinT[at];
        }`
  })
  return tensorOf(info)
}

/** silu(g)·u, elementwise. */
export const swiglu = (g: tf.Tensor2D, u: tf.Tensor2D): tf.Tensor2D => {
  if (!onWebgpu()) return tf.mul(tf.mul(g, tf.sigmoid(g)), u)
  const [n, f] = g.shape
  const info = run("swiglu", [["g", g], ["u", u]], [n, f], {
    uniforms: [["size", "int32", n * f]],
    code: `
        if (index < uniforms.size) {
          let a = g[index];
          result[index] = a / (1.0 + exp(-a)) * u[index];
        }`
  })
  return tensorOf(info)
}

/**
 * `pool` with row `rowsAt[i]` replaced by `updates[i]` for every i: on WebGPU the same tensor,
 * written in place (nothing else holds a pool, so no reader sees it change); elsewhere a new one,
 * and the caller disposes the old.
 */
export const writeRows = (pool: tf.Tensor2D, rowsAt: tf.Tensor1D, updates: tf.Tensor2D): tf.Tensor2D => {
  if (!onWebgpu()) return tf.tensorScatterUpdate(pool, tf.reshape(rowsAt, [-1, 1]), updates)
  const [n, width] = updates.shape
  run("writeRows", [["updates", updates], ["rowsAt", rowsAt]], pool.shape, {
    uniforms: [["count", "int32", n], ["width", "int32", width]],
    workgroups: Math.ceil((n * width) / WORKGROUP),
    code: `
        if (index < uniforms.count * uniforms.width) {
          let row = index / uniforms.width;
          let col = index - row * uniforms.width;
          result[rowsAt[row] * uniforms.width + col] = updates[index];
        }`,
    into: pool
  })
  return pool
}
