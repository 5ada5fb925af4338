/**
 * The workload profile: everything the simulation knows about a workload and a device, as plain
 * JSON. The real benchmark (bench/sync-vs-async.ts) writes one from measured runs; `defaultProfile`
 * stands in until then. Schema (all times in seconds):
 *
 * ```jsonc
 * {
 *   "source": "measured: ..." | "default-estimate: ...", // where the numbers come from
 *   "rollout": {
 *     "launch_s": Dist,          // harness start-up before its first model call (off-device)
 *     "turns": Dist,             // model calls per rollout (rounded, >= 1)
 *     "tokens_per_call": Dist,   // generated tokens per model call (rounded, >= 1)
 *     "tool_s": Dist,            // harness time after each call: tool runs, tests; the last one
 *                                // includes the verifier (off-device)
 *     "train_tokens_per_generated": number, // tokens trained per generated token (>= 1: prompts
 *                                // and observations are trained over too)
 *     "task_correlation": number // 0..1: how much the rollouts of one group (same task) share
 *                                // their turns and tool time (0 = independent)
 *   },
 *   "device": {
 *     "decode": [{ "concurrency": 1, "tok_per_s": 2973 }, ...], // aggregate decode rate of one
 *                                // device vs sequences decoded together (continuous batching)
 *     "update_fixed_s": number,  // per update, whatever the batch (optimizer step, set weights)
 *     "update_s_per_token": number, // per trained token on one device
 *     "pause_s": number,         // collocated: pause + resume overhead per update
 *     "weight_sync_s": number,   // split: generation devices stop this long to swap weights
 *     "allreduce_s": number,     // data-parallel gradient all-reduce, bandwidth term (see update time)
 *     "allreduce_latency_s": number // ... latency term per doubling of devices
 *   }
 * }
 * Dist = { "kind": "constant", "value": x }
 *      | { "kind": "lognormal", "median": m, "sigma": s, "min"?: a, "max"?: b }
 *      | { "kind": "samples", "values": [x, ...] }   // empirical, resampled by quantile
 * ```
 */

export type Dist =
  | { readonly kind: "constant"; readonly value: number }
  | { readonly kind: "lognormal"; readonly median: number; readonly sigma: number; readonly min?: number; readonly max?: number }
  | { readonly kind: "samples"; readonly values: ReadonlyArray<number> }

export interface DecodePoint {
  readonly concurrency: number
  readonly tok_per_s: number
}

export interface WorkloadProfile {
  readonly source: string
  readonly rollout: {
    readonly launch_s: Dist
    readonly turns: Dist
    readonly tokens_per_call: Dist
    readonly tool_s: Dist
    readonly train_tokens_per_generated: number
    readonly task_correlation: number
  }
  readonly device: {
    readonly decode: ReadonlyArray<DecodePoint>
    readonly update_fixed_s: number
    readonly update_s_per_token: number
    readonly pause_s: number
    readonly weight_sync_s: number
    readonly allreduce_s: number
    readonly allreduce_latency_s: number
  }
}

/** A malformed profile, with the JSON path of the first bad field. */
export class ProfileError extends Error {
  readonly _tag = "ProfileError"
  constructor(readonly path: string, reason: string) {
    super(`workload profile: ${path}: ${reason}`)
    this.name = "ProfileError"
  }
}

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x)

const num = (o: Record<string, unknown>, key: string, path: string, min = 0, max = Infinity): number => {
  const v = o[key]
  if (typeof v !== "number" || !Number.isFinite(v)) throw new ProfileError(`${path}.${key}`, `expected a finite number, got ${JSON.stringify(v)}`)
  if (v < min || v > max) throw new ProfileError(`${path}.${key}`, `expected ${min} <= value <= ${max}, got ${v}`)
  return v
}

const dist = (x: unknown, path: string): Dist => {
  if (!isObj(x)) throw new ProfileError(path, "expected a distribution object { kind: constant | lognormal | samples, ... }")
  switch (x.kind) {
    case "constant":
      return { kind: "constant", value: num(x, "value", path) }
    case "lognormal": {
      const d = { kind: "lognormal" as const, median: num(x, "median", path), sigma: num(x, "sigma", path, 0, 10) }
      const min = x.min === undefined ? undefined : num(x, "min", path)
      const max = x.max === undefined ? undefined : num(x, "max", path)
      if (d.median <= 0) throw new ProfileError(`${path}.median`, "must be > 0")
      if (min !== undefined && max !== undefined && min > max) throw new ProfileError(path, `min ${min} > max ${max}`)
      return { ...d, ...(min === undefined ? {} : { min }), ...(max === undefined ? {} : { max }) }
    }
    case "samples": {
      const vs = x.values
      if (!Array.isArray(vs) || vs.length === 0) throw new ProfileError(`${path}.values`, "expected a non-empty array of numbers")
      vs.forEach((v, i) => {
        if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new ProfileError(`${path}.values[${i}]`, `expected a number >= 0, got ${JSON.stringify(v)}`)
      })
      return { kind: "samples", values: vs as Array<number> }
    }
    default:
      throw new ProfileError(`${path}.kind`, `expected "constant", "lognormal" or "samples", got ${JSON.stringify(x.kind)}`)
  }
}

/** Checks an untrusted JSON value and returns it typed; throws `ProfileError` naming the bad field. */
export const parseProfile = (x: unknown): WorkloadProfile => {
  if (!isObj(x)) throw new ProfileError("$", "expected an object")
  if (typeof x.source !== "string") throw new ProfileError("$.source", "expected a string saying where the numbers come from")
  const r = x.rollout, d = x.device
  if (!isObj(r)) throw new ProfileError("$.rollout", "expected an object")
  if (!isObj(d)) throw new ProfileError("$.device", "expected an object")
  const decode = d.decode
  if (!Array.isArray(decode) || decode.length === 0) throw new ProfileError("$.device.decode", "expected a non-empty array of { concurrency, tok_per_s }")
  const points = decode.map((p, i) => {
    const path = `$.device.decode[${i}]`
    if (!isObj(p)) throw new ProfileError(path, "expected { concurrency, tok_per_s }")
    return { concurrency: num(p, "concurrency", path, 1), tok_per_s: num(p, "tok_per_s", path, Number.MIN_VALUE) }
  })
  points.forEach((p, i) => {
    if (i > 0 && p.concurrency <= points[i - 1]!.concurrency) throw new ProfileError(`$.device.decode[${i}].concurrency`, "concurrencies must be strictly increasing")
  })
  return {
    source: x.source,
    rollout: {
      launch_s: dist(r.launch_s, "$.rollout.launch_s"),
      turns: dist(r.turns, "$.rollout.turns"),
      tokens_per_call: dist(r.tokens_per_call, "$.rollout.tokens_per_call"),
      tool_s: dist(r.tool_s, "$.rollout.tool_s"),
      train_tokens_per_generated: num(r, "train_tokens_per_generated", "$.rollout", 0),
      task_correlation: num(r, "task_correlation", "$.rollout", 0, 1)
    },
    device: {
      decode: points,
      update_fixed_s: num(d, "update_fixed_s", "$.device"),
      update_s_per_token: num(d, "update_s_per_token", "$.device"),
      pause_s: num(d, "pause_s", "$.device"),
      weight_sync_s: num(d, "weight_sync_s", "$.device"),
      allreduce_s: num(d, "allreduce_s", "$.device"),
      allreduce_latency_s: num(d, "allreduce_latency_s", "$.device")
    }
  }
}

/**
 * Aggregate tokens/s of one device decoding `c` sequences together: linear between measured
 * points, proportional below the first (a device with c < first point is assumed to scale
 * linearly from 0), flat after the last (we don't extrapolate a curve we haven't measured).
 */
export const decodeRate = (curve: ReadonlyArray<DecodePoint>, c: number): number => {
  if (c <= 0) return 0
  const first = curve[0]!
  if (c <= first.concurrency) return (first.tok_per_s * c) / first.concurrency
  for (let i = 1; i < curve.length; i++) {
    const a = curve[i - 1]!, b = curve[i]!
    if (c <= b.concurrency) return a.tok_per_s + ((b.tok_per_s - a.tok_per_s) * (c - a.concurrency)) / (b.concurrency - a.concurrency)
  }
  return curve[curve.length - 1]!.tok_per_s
}

/**
 * Time of one update of `tokens` trained tokens over `devices` data-parallel devices. Assumption
 * (documented in the report): the per-token work splits evenly (1/D), the fixed part does not,
 * and the gradient all-reduce costs a bandwidth term that approaches 2× one copy of the gradient
 * (ring all-reduce: 2(D−1)/D) plus a latency term per doubling of devices (tree-shaped steps).
 */
export const updateTime = (dev: WorkloadProfile["device"], tokens: number, devices: number): number =>
  dev.update_fixed_s +
  (dev.update_s_per_token * tokens) / devices +
  (devices > 1 ? (dev.allreduce_s * 2 * (devices - 1)) / devices + dev.allreduce_latency_s * Math.ceil(Math.log2(devices)) : 0)

/**
 * Numbers measured on this machine (2 cores, tfjs wasm, 0.85M-parameter model) where we have
 * them, estimates where we don't. The real profile from bench/sync-vs-async.ts replaces it.
 */
export const defaultProfile: WorkloadProfile = {
  source:
    "default-estimate: decode curve and train step from bench/results/policy.json (2 cores, wasm); " +
    "harness launch from bench/results/rollout.json; turns, tokens and tool times are estimates of a mini-swe-like harness — replace with bench/sync-vs-async.ts output",
  rollout: {
    // ~10 harness starts/s on this machine (bench/results/rollout.json): ~0.1–0.2 s each.
    launch_s: { kind: "lognormal", median: 0.15, sigma: 0.2 },
    // A short agent loop: a few calls, occasionally many.
    turns: { kind: "lognormal", median: 4, sigma: 0.5, min: 1, max: 24 },
    // Context is 256 tokens, so calls stay short.
    tokens_per_call: { kind: "lognormal", median: 40, sigma: 0.5, min: 4, max: 200 },
    // Tool runs and tests: mostly quick, some slow test runs (the long tail).
    tool_s: { kind: "lognormal", median: 0.3, sigma: 1.0, min: 0.01, max: 30 },
    train_tokens_per_generated: 2,
    task_correlation: 0.5
  },
  device: {
    // bench/results/policy.json, continuous batching (32 is slower than 16 there, kept as measured).
    decode: [
      { concurrency: 1, tok_per_s: 2973 },
      { concurrency: 4, tok_per_s: 5803 },
      { concurrency: 16, tok_per_s: 6869 },
      { concurrency: 32, tok_per_s: 4174 }
    ],
    // 1.64 s per 32×128 = 4096-token step; ~0.2 s of it assumed fixed (optimizer, set weights).
    update_fixed_s: 0.2,
    update_s_per_token: (1.643 - 0.2) / 4096,
    pause_s: 0.02,
    // 0.85M float32 parameters = 3.4 MB over a local socket.
    weight_sync_s: 0.05,
    allreduce_s: 0.01,
    allreduce_latency_s: 0.002
  }
}
