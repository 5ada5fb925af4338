/**
 * The WGSL compute shaders of the WebGPU decode path (webgpuDecode.ts), one per step of the
 * transformer's inference pass. Shapes are baked into each shader's source as constants; what
 * changes per step (rows, their token ids, positions and cache rows, the picks) is read from one
 * `info` buffer of u32 written once per step:
 *
 *   info[0] rows M    info[1] last rows P    info[2] LAST (offset)    info[3] PICKS (offset)
 *   info[4 + 4r ..]   row r: token id, position, cache row it writes, first row of its cache
 *   info[LAST + p]    the row whose logits chunk p needs (its last token)
 *   info[PICKS + 3j]  draw j: the logits row it reads, τ and u (f32 bits)
 *
 * Weights are in `[out, in]` layout (each output's weights contiguous), activations row-major.
 * The products by the weights (two shaders, chosen per step) are in webgpuProducts.ts.
 * Every barrier sits in uniform control flow: rows past M are guarded at their reads and writes.
 */

/** Offset of the per-row entries in `info`. */
export const META_ROWS = 4

/** A float as a WGSL literal (never "1", which would be an integer). */
const f = (x: number) => x.toExponential()

/** The binding every shader has: the step's `info`. */
export const header = `
@group(0) @binding(0) var<storage, read> info : array<u32>;`

/** x[r] = table[id of row r]: the token embeddings of the step's rows. */
export const embedShader = (D: number) => `${header}
@group(0) @binding(1) var<storage, read> table : array<f32>;
@group(0) @binding(2) var<storage, read_write> x : array<f32>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g : vec3<u32>, @builtin(workgroup_id) w : vec3<u32>) {
  let r = w.y;
  if (g.x < ${D}u) {
    x[r * ${D}u + g.x] = table[info[${META_ROWS}u + r * 4u] * ${D}u + g.x];
  }
}`

/**
 * RMSNorm of rows of x, scaled by w: one workgroup per output row, which is row r of x, or with
 * `gather` the row info[LAST + r] (the final norm reads only each chunk's last token).
 */
export const rmsNormShader = (D: number, eps: number, gather: boolean) => `${header}
@group(0) @binding(1) var<storage, read> x : array<f32>;
@group(0) @binding(2) var<storage, read> w : array<f32>;
@group(0) @binding(3) var<storage, read_write> out : array<f32>;
var<workgroup> part : array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) t : u32, @builtin(workgroup_id) wid : vec3<u32>) {
  let r = wid.x;
  let src = ${gather ? "info[info[2] + r]" : "r"} * ${D}u;
  var s = 0.0;
  for (var j = t; j < ${D}u; j += 256u) {
    let v = x[src + j];
    s += v * v;
  }
  part[t] = s;
  workgroupBarrier();
  for (var k = 128u; k > 0u; k >>= 1u) {
    if (t < k) { part[t] += part[t + k]; }
    workgroupBarrier();
  }
  let inv = inverseSqrt(part[0] / ${f(D)} + ${f(eps)});
  if (r < ${gather ? "info[1]" : "info[0]"}) {
    for (var j = t; j < ${D}u; j += 256u) { out[r * ${D}u + j] = x[src + j] * inv * w[j]; }
  }
}`

/**
 * After the q/k/v product, per row and head (workgroup (head, row); heads q, then k, then v):
 * Qwen3's per-head RMSNorm of q and k when `qkNorm`, RoPE of q (in place) and of k, and k and v
 * written to the row's slot of the layer's key and value pools. cs holds cos then sin, [ctx, hd/2].
 */
export const qkvShader = (c: { readonly H: number; readonly KV: number; readonly HD: number; readonly context: number; readonly eps: number; readonly qkNorm: boolean }) => {
  const { H, KV, HD } = c
  const half = HD / 2
  const QKV = (H + 2 * KV) * HD
  const KVD = KV * HD
  return `${header}
@group(0) @binding(1) var<storage, read_write> qkv : array<f32>;
@group(0) @binding(2) var<storage, read> qn : array<f32>;
@group(0) @binding(3) var<storage, read> kn : array<f32>;
@group(0) @binding(4) var<storage, read> cs : array<f32>;
@group(0) @binding(5) var<storage, read_write> keys : array<f32>;
@group(0) @binding(6) var<storage, read_write> values : array<f32>;
var<workgroup> part : array<f32, 64>;
@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) t : u32, @builtin(workgroup_id) wid : vec3<u32>) {
  let h = wid.x;
  let r = wid.y;
  let at = r * ${QKV}u + h * ${HD}u;
  let pos = info[${META_ROWS}u + r * 4u + 1u];
  let slot = info[${META_ROWS}u + r * 4u + 2u];
  if (h >= ${H + KV}u) {
    for (var j = t; j < ${HD}u; j += 64u) { values[slot * ${KVD}u + (h - ${H + KV}u) * ${HD}u + j] = qkv[at + j]; }
    return;
  }
  var inv = 1.0;
  if (${c.qkNorm}) {
    var s = 0.0;
    for (var j = t; j < ${HD}u; j += 64u) { s += qkv[at + j] * qkv[at + j]; }
    part[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
      if (t < k) { part[t] += part[t + k]; }
      workgroupBarrier();
    }
    inv = inverseSqrt(part[0] / ${f(HD)} + ${f(c.eps)});
  }
  for (var i = t; i < ${half}u; i += 64u) {
    var s1 = 1.0;
    var s2 = 1.0;
    if (${c.qkNorm}) {
      s1 = inv * select(kn[i], qn[i], h < ${H}u);
      s2 = inv * select(kn[i + ${half}u], qn[i + ${half}u], h < ${H}u);
    }
    let x1 = qkv[at + i] * s1;
    let x2 = qkv[at + i + ${half}u] * s2;
    let co = cs[pos * ${half}u + i];
    let si = cs[${c.context * half}u + pos * ${half}u + i];
    let y1 = x1 * co - x2 * si;
    let y2 = x2 * co + x1 * si;
    if (h < ${H}u) {
      qkv[at + i] = y1;
      qkv[at + i + ${half}u] = y2;
    } else {
      let k0 = slot * ${KVD}u + (h - ${H}u) * ${HD}u;
      keys[k0 + i] = y1;
      keys[k0 + i + ${half}u] = y2;
    }
  }
}`
}

/** Positions whose scores one attention workgroup holds at a time. */
const ATTENTION_CHUNK = 1024

/**
 * Causal attention of each row's query heads over its own cache (workgroup (head, row)): the row
 * at position p reads cache rows start..start+p, which the qkv shader has just written. Scores
 * of a chunk of positions go to workgroup memory, then a running softmax (max, sum) rescales the
 * weighted sum of values; lanes split the head's dims (vec4 each) × the positions, summed at the
 * end. Grouped-query attention: query head h reads kv head h / (H / KV).
 */
export const attentionShader = (c: { readonly H: number; readonly KV: number; readonly HD: number }) => {
  const { H, KV, HD } = c
  const HD4 = HD / 4
  const PL = 256 / HD4
  const QKV4 = ((H + 2 * KV) * HD) / 4
  const KVD4 = (KV * HD) / 4
  return `${header}
@group(0) @binding(1) var<storage, read> qkv : array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> keys : array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> values : array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out : array<vec4<f32>>;
var<workgroup> q : array<vec4<f32>, ${HD4}>;
var<workgroup> scores : array<f32, ${ATTENTION_CHUNK}>;
var<workgroup> red : array<f32, 256>;
var<workgroup> accs : array<vec4<f32>, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) t : u32, @builtin(workgroup_id) wid : vec3<u32>) {
  let h = wid.x;
  let r = wid.y;
  let kv = (h / ${H / KV}u) * ${HD4}u;
  let len = info[${META_ROWS}u + r * 4u + 1u] + 1u;
  let start = info[${META_ROWS}u + r * 4u + 3u];
  let dl = t % ${HD4}u;
  let pl = t / ${HD4}u;
  if (t < ${HD4}u) { q[t] = qkv[r * ${QKV4}u + h * ${HD4}u + t] * ${f(1 / Math.sqrt(HD))}; }
  workgroupBarrier();
  var m = -1e30;
  var l = 0.0;
  var acc = vec4<f32>(0.0);
  for (var c0 = 0u; c0 < len; c0 += ${ATTENTION_CHUNK}u) {
    let n = min(${ATTENTION_CHUNK}u, len - c0);
    var mx = -1e30;
    for (var j = t; j < n; j += 256u) {
      let row = (start + c0 + j) * ${KVD4}u + kv;
      var s = 0.0;
      for (var i = 0u; i < ${HD4}u; i++) { s += dot(q[i], keys[row + i]); }
      scores[j] = s;
      mx = max(mx, s);
    }
    red[t] = mx;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
      if (t < k) { red[t] = max(red[t], red[t + k]); }
      workgroupBarrier();
    }
    let next = max(m, red[0]);
    let rescale = exp(m - next);
    m = next;
    acc *= rescale;
    l *= rescale;
    for (var j = pl; j < n; j += ${PL}u) {
      let p = exp(scores[j] - m);
      l += p;
      acc += p * values[(start + c0 + j) * ${KVD4}u + kv + dl];
    }
    workgroupBarrier();
  }
  accs[t] = acc;
  red[t] = l;
  workgroupBarrier();
  if (pl == 0u) {
    var a = vec4<f32>(0.0);
    var total = 0.0;
    for (var p = 0u; p < ${PL}u; p++) {
      a += accs[p * ${HD4}u + dl];
      total += red[p * ${HD4}u + dl];
    }
    out[r * ${H * HD4}u + h * ${HD4}u + dl] = a / total;
  }
}`
}

/** act[r, i] = silu(g)·u of gu[r] = [g (F) | u (F)]. */
export const swigluShader = (F: number) => `${header}
@group(0) @binding(1) var<storage, read> gu : array<f32>;
@group(0) @binding(2) var<storage, read_write> act : array<f32>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g : vec3<u32>, @builtin(workgroup_id) w : vec3<u32>) {
  let r = w.y;
  if (g.x < ${F}u && r < info[0]) {
    let x = gu[r * ${2 * F}u + g.x];
    act[r * ${F}u + g.x] = x / (1.0 + exp(-x)) * gu[r * ${2 * F}u + ${F}u + g.x];
  }
}`

/**
 * The draws (deviceDraw.ts's, result layout [j, 4]: drawn id, its logprob under τ, argmax
 * id, its logprob under τ), one workgroup per draw: each lane takes a contiguous slice of the
 * vocabulary, so the slices' sums in lane order are the cumulative softmax by slices; the lane
 * whose slice holds u·total finds the first token there at which the cumulative reaches it.
 */
export const sampleShader = (V: number) => {
  const slice = Math.ceil(V / 256)
  return `${header}
@group(0) @binding(1) var<storage, read> logits : array<f32>;
@group(0) @binding(2) var<storage, read_write> draws : array<f32>;
var<workgroup> best : array<f32, 256>;
var<workgroup> index : array<u32, 256>;
var<workgroup> sums : array<f32, 256>;
var<workgroup> found : array<f32, 3>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) t : u32, @builtin(workgroup_id) wid : vec3<u32>) {
  let j = wid.x;
  let at = info[3] + j * 3u;
  let row = info[at] * ${V}u;
  let tau = bitcast<f32>(info[at + 1u]);
  let u = bitcast<f32>(info[at + 2u]);
  let lo = min(t * ${slice}u, ${V}u);
  let hi = min(lo + ${slice}u, ${V}u);
  var bz = -3.0e38;
  var bi = ${V}u;
  for (var i = lo; i < hi; i++) {
    let z = logits[row + i];
    if (z > bz) { bz = z; bi = i; }
  }
  best[t] = bz;
  index[t] = bi;
  workgroupBarrier();
  for (var k = 128u; k > 0u; k >>= 1u) {
    if (t < k) {
      let o = best[t + k];
      if (o > best[t] || (o == best[t] && index[t + k] < index[t])) { best[t] = o; index[t] = index[t + k]; }
    }
    workgroupBarrier();
  }
  let mx = best[0] / tau;
  var s = 0.0;
  for (var i = lo; i < hi; i++) { s += exp(logits[row + i] / tau - mx); }
  sums[t] = s;
  workgroupBarrier();
  if (t == 0u) {
    var total = 0.0;
    for (var k = 0u; k < 256u; k++) { total += sums[k]; }
    var before = 0.0;
    var lane = 256u;
    for (var k = 0u; k < 256u; k++) {
      if (lane == 256u) {
        if (before + sums[k] >= u * total) { lane = k; } else { before += sums[k]; }
      }
    }
    found[0] = f32(lane);
    found[1] = before;
    found[2] = total;
  }
  workgroupBarrier();
  let lane = u32(found[0]);
  let total = found[2];
  let lse = mx + log(total);
  if (t == 0u) {
    draws[j * 4u + 2u] = f32(index[0]);
    draws[j * 4u + 3u] = mx - lse;
  }
  // the lane whose slice holds u·total (or, should rounding leave none, lane 0 with the last token)
  if (t == lane || (lane == 256u && t == 0u)) {
    var drawn = ${V - 1}u;
    var cum = found[1];
    if (t == lane) {
      drawn = hi - 1u;
      for (var i = lo; i < hi; i++) {
        cum += exp(logits[row + i] / tau - mx);
        if (cum >= u * total) { drawn = i; break; }
      }
    }
    draws[j * 4u] = f32(drawn);
    draws[j * 4u + 1u] = logits[row + drawn] / tau - lse;
  }
}`
}
