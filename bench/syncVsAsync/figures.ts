/**
 * The figures of one mode's run, the spread over repeats, and the two ratios with their goals —
 * pure functions of the records (records.ts).
 */
import { isContextFull, isHarnessError } from "@reins/protocol"
import type { CallRec, Interval, Mode, ModeRecords } from "./records.js"

export interface ModeFigures {
  readonly mode: Mode
  readonly devices: number
  readonly repeat: number
  /** From the first task handed out to the last version published. */
  readonly wall_s: number
  readonly updates: number
  readonly skipped_updates: number
  readonly rollouts_trained: number
  readonly rollouts_per_s: number
  readonly rollouts_per_s_per_device: number
  readonly tokens_trained_per_s: number
  readonly action_tokens_trained_per_s: number
  /** Fractions of device-time (over both devices in split), weighted by each version's wall time. */
  readonly device_busy: { readonly generating: number; readonly training: number; readonly idle: number }
  /** Gateway paused (sync, collocated) or generation stopped for a weight swap (split). */
  readonly paused_s: number
  readonly paused_fraction: number
  readonly calls: number
  /** Calls that waited at the pause gate (the Gateway's `heldMs` > 0) and how long. */
  readonly held_calls: number
  readonly held_mean_s: number
  /** Calls whose latency, as the harness saw it, overlapped a pause or weight swap (held or interrupted). */
  readonly delayed_calls: number
  readonly added_latency_mean_s: number
  readonly added_latency_p95_s: number
  /** Trained rollouts whose tokens come from more than one policy version (ran across an update). */
  readonly carried_over_rollouts: number
  /** Action tokens by staleness, over all updates. */
  readonly staleness_histogram: ReadonlyArray<number>
  readonly max_staleness_seen: number
  readonly max_staleness: number
  /** Mean reward of the rollouts trained by the first and the last update. */
  readonly first_reward: number | null
  readonly final_reward: number | null
  readonly base_pass_at_1: number | null
  readonly final_pass_at_1: number | null
  /** Calls a harness saw fail (status ≠ 200, outside cancelled rollouts), except the model's context limit: must be 0. */
  readonly harness_errors: number
  /** Calls refused because the conversation outgrew the model's context (the episode ended there). */
  readonly context_full_calls: number
  readonly failed_rollouts: number
  readonly timed_out: boolean
}

/** Nearest-rank percentile. */
export const pct = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return 0
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!
}

const mean = (xs: ReadonlyArray<number>) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length)

/** Sorted, non-overlapping union of intervals. */
export const union = (xs: ReadonlyArray<Interval>): Array<Interval> => {
  const s = [...xs].filter((i) => i.end > i.start).sort((a, b) => a.start - b.start)
  const out: Array<Interval> = []
  for (const i of s) {
    const last = out.at(-1)
    if (last !== undefined && i.start <= last.end) out[out.length - 1] = { start: last.start, end: Math.max(last.end, i.end) }
    else out.push({ ...i })
  }
  return out
}

/** Length of [a, b] covered by a sorted union of intervals. */
export const overlap = (a: number, b: number, u: ReadonlyArray<Interval>): number => {
  let s = 0
  for (const i of u) {
    if (i.start >= b) break
    s += Math.max(0, Math.min(b, i.end) - Math.max(a, i.start))
  }
  return s
}

/** The parts of [a, b] outside a sorted union of intervals. */
export const subtract = (a: number, b: number, u: ReadonlyArray<Interval>): Array<Interval> => {
  const out: Array<Interval> = []
  let from = a
  for (const i of u) {
    if (i.end <= from) continue
    if (i.start >= b) break
    if (i.start > from) out.push({ start: from, end: i.start })
    from = Math.max(from, i.end)
  }
  if (from < b) out.push({ start: from, end: b })
  return out
}

/** Periods when the device(s) stopped generating for an update: the pauses, or split's weight swaps. */
export const stalls = (r: ModeRecords): Array<Interval> => union(r.mode === "split" ? r.syncs : r.pauses)

const carriedOver = (calls: ReadonlyArray<CallRec>) => {
  const vs = calls.flatMap((c) => (c.minVersion === null ? [] : [c.minVersion, c.maxVersion!]))
  return vs.length > 0 && Math.min(...vs) !== Math.max(...vs)
}

export const modeFigures = (r: ModeRecords, maxStaleness: number): ModeFigures => {
  const wall = Math.max(1e-9, (r.tEnd - r.t0) / 1000)
  const trainedRollouts = r.versions.reduce((s, v) => s + v.rollouts, 0)
  const tokens = r.versions.reduce((s, v) => s + v.tokens, 0)
  const actionTokens = r.versions.reduce((s, v) => s + v.actionTokens, 0)
  const vWall = r.versions.reduce((s, v) => s + v.wallSeconds, 0)
  const weighted = (k: "generating" | "training" | "idle") =>
    vWall > 0 ? r.versions.reduce((s, v) => s + v.device[k] * v.wallSeconds, 0) / vWall : k === "idle" ? 1 : 0
  const stopped = stalls(r)
  const pausedS = stopped.reduce((s, i) => s + (Math.min(i.end, r.tEnd) - Math.max(i.start, r.t0)), 0) / 1000
  const live = r.rollouts.filter((x) => x.state !== "cancelled")
  const calls = r.rollouts.flatMap((x) => x.calls)
  const held = calls.filter((c) => c.heldMs > 0)
  const added = calls.map((c) => overlap(c.receivedAt, c.finishedAt, stopped) / 1000).filter((s) => s > 0)
  const histogram: Array<number> = []
  for (const v of r.versions) v.staleness.forEach((n, s) => (histogram[s] = (histogram[s] ?? 0) + n))
  for (let i = 0; i < histogram.length; i++) histogram[i] ??= 0
  return {
    mode: r.mode,
    devices: r.devices,
    repeat: r.repeat,
    wall_s: wall,
    updates: r.versions.length,
    skipped_updates: r.skipped,
    rollouts_trained: trainedRollouts,
    rollouts_per_s: trainedRollouts / wall,
    rollouts_per_s_per_device: trainedRollouts / wall / r.devices,
    tokens_trained_per_s: tokens / wall,
    action_tokens_trained_per_s: actionTokens / wall,
    device_busy: { generating: weighted("generating"), training: weighted("training"), idle: weighted("idle") },
    paused_s: pausedS,
    paused_fraction: pausedS / wall,
    calls: calls.length,
    held_calls: held.length,
    held_mean_s: mean(held.map((c) => c.heldMs / 1000)),
    delayed_calls: added.length,
    added_latency_mean_s: mean(added),
    added_latency_p95_s: pct(added, 95),
    carried_over_rollouts: r.rollouts.filter((x) => x.trained && carriedOver(x.calls)).length,
    staleness_histogram: histogram,
    max_staleness_seen: r.versions.reduce((m, v) => Math.max(m, v.stalenessMax), 0),
    max_staleness: r.mode === "sync" ? 0 : maxStaleness,
    first_reward: r.versions[0]?.rewardMean ?? null,
    final_reward: r.versions.at(-1)?.rewardMean ?? null,
    base_pass_at_1: r.basePassAt1,
    final_pass_at_1: r.finalPassAt1,
    harness_errors: live.reduce((s, x) => s + x.calls.filter(isHarnessError).length, 0),
    context_full_calls: live.reduce((s, x) => s + x.calls.filter(isContextFull).length, 0),
    failed_rollouts: r.rollouts.filter((x) => x.state === "failed").length,
    timed_out: r.timedOut
  }
}

export interface Spread {
  readonly mean: number
  readonly min: number
  readonly max: number
  /** Sample standard deviation (0 for one repeat). */
  readonly sd: number
  readonly n: number
}

export const spread = (xs: ReadonlyArray<number>): Spread => {
  const m = mean(xs)
  const sd = xs.length > 1 ? Math.sqrt(xs.reduce((s, x) => s + (x - m) ** 2, 0) / (xs.length - 1)) : 0
  return { mean: m, min: Math.min(...xs), max: Math.max(...xs), sd, n: xs.length }
}

export interface RepeatRatios {
  readonly repeat: number
  /** The better collocated variant of this repeat (by rollouts trained per second). */
  readonly collocated_variant: Mode
  readonly collocated_vs_sync: number
  readonly collocated_vs_split_per_device: number
  readonly drain_vs_sync: number
  readonly interrupt_vs_sync: number
}

/** The ratios of one repeat, every mode measured in it (the baseline in the same run). */
export const repeatRatios = (figs: ReadonlyArray<ModeFigures>): RepeatRatios => {
  const get = (m: Mode) => {
    const f = figs.find((x) => x.mode === m)
    if (f === undefined) throw new Error(`repeat ${figs[0]?.repeat ?? "?"} has no ${m} run`)
    return f
  }
  const sync = get("sync"), drain = get("collocated-drain"), interrupt = get("collocated-interrupt"), split = get("split")
  const coll = interrupt.rollouts_per_s >= drain.rollouts_per_s ? interrupt : drain
  return {
    repeat: sync.repeat,
    collocated_variant: coll.mode,
    collocated_vs_sync: coll.rollouts_per_s / sync.rollouts_per_s,
    collocated_vs_split_per_device: coll.rollouts_per_s_per_device / split.rollouts_per_s_per_device,
    drain_vs_sync: drain.rollouts_per_s / sync.rollouts_per_s,
    interrupt_vs_sync: interrupt.rollouts_per_s / sync.rollouts_per_s
  }
}

export interface Goal {
  readonly goal: number
  readonly measured: number
  readonly met: boolean
  /** How far below the goal, as a fraction of it (0 when met). */
  readonly missed_by: number
  readonly text: string
}

export const goal = (name: string, target: number, measured: number): Goal => {
  const met = measured >= target
  const missedBy = met ? 0 : (target - measured) / target
  return {
    goal: target,
    measured,
    met,
    missed_by: missedBy,
    text: met
      ? `${name}: goal ≥ ${target} met (measured ${measured.toFixed(2)})`
      : `${name}: goal ≥ ${target} MISSED — measured ${measured.toFixed(2)}, ${(missedBy * 100).toFixed(0)}% short`
  }
}
