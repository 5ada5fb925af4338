/**
 * The measured workload profile (bench/sim/profile.ts's schema) from the records of the real runs,
 * so `npm run bench -- sim` simulates exactly what was measured and reports its error:
 *
 * - rollout: start-up before the first call, calls per rollout, generated tokens per call, harness
 *   time after each call (the gap to the next call; after the last one, until the rollout ended:
 *   exit + verifier), all as empirical samples; trained tokens per generated token from the
 *   Trainer's metrics; how much the rollouts of a group share their duration (intra-class
 *   correlation of rollout durations by group);
 * - device: aggregate decode rate against the number of sequences generating together (calls of
 *   the one-device modes, outside pauses, their output tokens spread evenly over their generation
 *   time), update time against trained tokens (least squares over every update), the pause
 *   overhead around an update (collocated) and the weight swap (split).
 */
import { defaultProfile, type DecodePoint, type WorkloadProfile } from "../sim/profile.js"
import { overlap, stalls, union } from "./figures.js"
import type { Interval, ModeRecords, RolloutRec } from "./records.js"

const finished = (r: RolloutRec) => r.state === "succeeded" && r.startedAt !== null && r.finishedAt !== null && r.calls.length > 0

const round = (x: number, digits = 4) => Number(x.toPrecision(digits))
const samples = (xs: ReadonlyArray<number>, fallback: number) => ({ kind: "samples" as const, values: xs.length > 0 ? xs.map((x) => round(Math.max(0, x))) : [fallback] })

/** One-way ANOVA intra-class correlation of `value` by `key`, clamped to [0, 1]. */
export const intraClassCorrelation = (rows: ReadonlyArray<{ readonly key: string; readonly value: number }>): number => {
  const groups = new Map<string, Array<number>>()
  for (const r of rows) groups.set(r.key, [...(groups.get(r.key) ?? []), r.value])
  const gs = [...groups.values()].filter((g) => g.length >= 2)
  const N = gs.reduce((s, g) => s + g.length, 0), k = gs.length
  if (k < 2 || N <= k) return 0
  const all = gs.flat(), grand = all.reduce((a, b) => a + b, 0) / N
  const means = gs.map((g) => g.reduce((a, b) => a + b, 0) / g.length)
  const ssb = gs.reduce((s, g, i) => s + g.length * (means[i]! - grand) ** 2, 0)
  const ssw = gs.reduce((s, g, i) => s + g.reduce((t, x) => t + (x - means[i]!) ** 2, 0), 0)
  const msb = ssb / (k - 1), msw = ssw / (N - k)
  const n0 = (N - gs.reduce((s, g) => s + g.length ** 2, 0) / N) / (k - 1)
  const icc = (msb - msw) / (msb + (n0 - 1) * msw)
  return Number.isFinite(icc) ? Math.min(1, Math.max(0, icc)) : 0
}

/**
 * Aggregate tokens/s at each concurrency: the time line cut where any call starts or ends
 * generating; in each piece, c calls generate and each produces tokens at its own mean rate.
 * Pieces inside `excluded` (pauses) are skipped. Points with too little time are dropped.
 */
export const decodeCurve = (
  calls: ReadonlyArray<{ readonly start: number; readonly end: number; readonly tokens: number }>,
  excluded: ReadonlyArray<Interval>,
  minSeconds = 1
): Array<DecodePoint> => {
  const ex = union(excluded)
  // A call interrupted by a pause generated only outside it: its rate is over that time.
  const live = calls
    .map((c) => ({ ...c, generating: c.end - c.start - overlap(c.start, c.end, ex) }))
    .filter((c) => c.generating > 0 && c.tokens > 0)
  const cuts = [...new Set(live.flatMap((c) => [c.start, c.end]).concat(ex.flatMap((i) => [i.start, i.end])))].sort((a, b) => a - b)
  const time = new Map<number, number>(), tokens = new Map<number, number>()
  for (let i = 0; i + 1 < cuts.length; i++) {
    const a = cuts[i]!, b = cuts[i + 1]!
    if (overlap(a, b, ex) > 0) continue
    const active = live.filter((c) => c.start <= a && c.end >= b)
    if (active.length === 0) continue
    const c = active.length
    time.set(c, (time.get(c) ?? 0) + (b - a) / 1000)
    tokens.set(c, (tokens.get(c) ?? 0) + active.reduce((s, x) => s + (x.tokens * (b - a)) / x.generating, 0))
  }
  return [...time.keys()]
    .sort((a, b) => a - b)
    .filter((c) => time.get(c)! >= minSeconds)
    .map((c) => ({ concurrency: c, tok_per_s: round(tokens.get(c)! / time.get(c)!) }))
}

/** Least squares y = a + b·x; falls back to y proportional to x (through the means) when x does not vary or the fit goes negative. */
export const linearFit = (xs: ReadonlyArray<number>, ys: ReadonlyArray<number>): { readonly a: number; readonly b: number } => {
  const n = xs.length
  if (n === 0) return { a: 0, b: 0 }
  const mx = xs.reduce((s, x) => s + x, 0) / n, my = ys.reduce((s, y) => s + y, 0) / n
  const sxx = xs.reduce((s, x) => s + (x - mx) ** 2, 0)
  const sxy = xs.reduce((s, x, i) => s + (x - mx) * (ys[i]! - my), 0)
  if (sxx === 0) return { a: 0, b: mx > 0 ? my / mx : 0 }
  const b = sxy / sxx
  const a = my - b * mx
  // A negative intercept or slope is noise on few points: keep the time, proportional to tokens.
  if (b < 0 || a < 0) return { a: 0, b: mx > 0 ? my / mx : 0 }
  return { a, b }
}

export const extractProfile = (runs: ReadonlyArray<ModeRecords>, source: string): WorkloadProfile => {
  const rollouts = runs.flatMap((r) => r.rollouts.filter(finished))
  const launch = rollouts.map((r) => (r.calls[0]!.receivedAt - r.startedAt!) / 1000)
  const turns = rollouts.map((r) => r.calls.length)
  const tokens = rollouts.flatMap((r) => r.calls.map((c) => c.outputTokens))
  const tool = rollouts.flatMap((r) =>
    r.calls.map((c, i) => ((i + 1 < r.calls.length ? r.calls[i + 1]!.receivedAt : r.finishedAt!) - c.finishedAt) / 1000)
  )
  const versions = runs.flatMap((r) => r.versions)
  const trained = versions.reduce((s, v) => s + v.tokens, 0), actions = versions.reduce((s, v) => s + v.actionTokens, 0)
  const icc = intraClassCorrelation(rollouts.filter((r) => r.group !== null).map((r) => ({ key: `${r.group}`, value: (r.finishedAt! - r.startedAt!) / 1000 })))

  const oneDevice = runs.filter((r) => r.devices === 1)
  const decodeCalls = oneDevice.flatMap((r) =>
    r.rollouts.flatMap((x) => x.calls.filter((c) => c.startedAt !== null && c.status === 200).map((c) => ({ start: c.startedAt!, end: c.finishedAt, tokens: c.outputTokens })))
  )
  const excluded = union(oneDevice.flatMap((r) => stalls(r)))
  const curve = decodeCurve(decodeCalls, excluded)
  const trains = runs.flatMap((r) => r.trains)
  const fit = linearFit(trains.map((t) => t.tokens), trains.map((t) => (t.end - t.start) / 1000))
  const pauseOverhead = runs
    .filter((r) => r.mode.startsWith("collocated"))
    .flatMap((r) => r.pauses.map((p) => {
      const inside = r.trains.filter((t) => t.start >= p.start && t.end <= p.end).reduce((s, t) => s + (t.end - t.start), 0)
      return Math.max(0, (p.end - p.start - inside) / 1000)
    }))
  const syncs = runs.flatMap((r) => r.syncs.map((s) => (s.end - s.start) / 1000))
  const mean = (xs: ReadonlyArray<number>, fallback: number) => (xs.length === 0 ? fallback : xs.reduce((a, b) => a + b, 0) / xs.length)
  return {
    source,
    rollout: {
      launch_s: samples(launch, 0.1),
      turns: samples(turns, 1),
      tokens_per_call: samples(tokens, 1),
      tool_s: samples(tool, 0),
      train_tokens_per_generated: round(actions > 0 ? Math.max(1, trained / actions) : defaultProfile.rollout.train_tokens_per_generated),
      task_correlation: round(icc)
    },
    device: {
      decode: curve.length > 0 ? curve : defaultProfile.device.decode,
      update_fixed_s: round(fit.a),
      update_s_per_token: round(fit.b),
      pause_s: round(mean(pauseOverhead, defaultProfile.device.pause_s)),
      weight_sync_s: round(mean(syncs, defaultProfile.device.weight_sync_s)),
      // One machine: no data-parallel update was measured; the estimates stand.
      allreduce_s: defaultProfile.device.allreduce_s,
      allreduce_latency_s: defaultProfile.device.allreduce_latency_s
    }
  }
}
