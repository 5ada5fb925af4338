// The Runs page's numbers, folded from the durable event stream one event at a time.

/** Rolling windows over the last N final rewards. */
const WINDOW = 16
/** Sampled tokens are counted per bucket of this many seconds. */
const BUCKET_S = 10

export const emptyRun = () => ({
  events: 0,
  first: null,
  last: null,
  rewards: [],
  versions: [],
  updates: [],
  pausedAt: null,
  pauses: [],
  tokenBuckets: new Map(),
  ended: { succeeded: 0, failed: 0, cancelled: 0 },
  rollouts: 0,
  /** Per rollout: the oldest policy version among its sampled tokens so far. */
  oldest: new Map(),
  /** Per ended rollout: how many versions its oldest token is behind the latest published one. */
  staleness: [],
  /** The Trainer's updates (`trainer.version`: its VersionMetrics) and evaluations, when the run records them. */
  trained: [],
  evaluations: []
})

/** Folds one event (as `/api/events` sends it) into `run`, in place. */
export const foldEvent = (run, e) => {
  const t = e.at / 1000
  run.events++
  run.first ??= t
  run.last = t
  const d = e.data ?? {}
  switch (e.type) {
    case "rollout.created":
      run.rollouts++
      break
    case "attempt.state":
      if (d.to in run.ended) run.ended[d.to]++
      if ((d.to === "succeeded" || d.to === "failed") && run.oldest.has(e.rollout_id) && run.versions.length > 0) {
        run.staleness.push({ t, behind: run.versions[run.versions.length - 1].version - run.oldest.get(e.rollout_id) })
      }
      break
    case "reward.recorded":
      if (d.callId === null || d.callId === undefined) run.rewards.push({ t, value: d.value })
      break
    case "call.recorded": {
      const b = Math.floor(t / BUCKET_S) * BUCKET_S
      run.tokenBuckets.set(b, (run.tokenBuckets.get(b) ?? 0) + (d.outputTokens ?? 0))
      if (typeof d.minVersion === "number" && e.rollout_id) run.oldest.set(e.rollout_id, Math.min(d.minVersion, run.oldest.get(e.rollout_id) ?? Infinity))
      break
    }
    case "model.version":
      run.versions.push({ t, version: d.version })
      break
    case "trainer.version":
      run.trained.push({
        t,
        version: d.version,
        tokensPerSecond: d.wallSeconds > 0 ? d.used.tokens / d.wallSeconds : null,
        actionTokensPerSecond: d.wallSeconds > 0 ? d.used.actionTokens / d.wallSeconds : null,
        stalenessMean: d.staleness.mean,
        stalenessMax: d.staleness.max
      })
      break
    case "evaluation":
      run.evaluations.push({ t, version: d.version, split: d.split, passAt1: d.passAt1, greedyPassAt1: d.greedyPassAt1 })
      break
    case "gateway.paused":
      run.pausedAt = t
      break
    case "gateway.resumed":
      run.updates.push({ t, pausedSeconds: d.pausedSeconds ?? 0, held: d.held ?? 0, version: d.version })
      run.pauses.push({ from: run.pausedAt ?? t - (d.pausedSeconds ?? 0), to: t })
      run.pausedAt = null
      break
  }
}

const rolling = (values, f) => values.map((_, i) => f(values.slice(Math.max(0, i - WINDOW + 1), i + 1)))
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length

const byVersion = (evaluations) => {
  const last = new Map(evaluations.map((x) => [x.version, x]))
  const rows = [...last.values()].sort((a, b) => a.version - b.version)
  return [rows.map((x) => x.version), rows.map((x) => x.passAt1), rows.map((x) => x.greedyPassAt1)]
}

/** uPlot data sets: [xs, ...ys]. */
export const chartsOf = (run) => {
  const rewards = run.rewards.map((r) => r.value)
  const buckets = [...run.tokenBuckets.entries()].sort((a, b) => a[0] - b[0])
  return {
    reward: [run.rewards.map((r) => r.t), rolling(rewards, mean), rolling(rewards, (xs) => xs.filter((x) => x > 0).length / xs.length)],
    versions: [run.versions.map((v) => v.t), run.versions.map((v) => v.version)],
    updates: [run.updates.map((_, i) => i + 1), run.updates.map((u) => u.pausedSeconds), run.updates.map((u) => u.held)],
    tokens: [buckets.map(([b]) => b), buckets.map(([, n]) => n / BUCKET_S)],
    trained: [run.trained.map((x) => x.version), run.trained.map((x) => x.tokensPerSecond), run.trained.map((x) => x.actionTokensPerSecond)],
    trainedStaleness: [run.trained.map((x) => x.version), run.trained.map((x) => x.stalenessMean), run.trained.map((x) => x.stalenessMax)],
    // Evaluations by version (uPlot wants increasing x: a version evaluated twice keeps its last result).
    evaluations: byVersion(run.evaluations.filter((x) => x.split === "test")),
    staleness: [run.staleness.map((x) => x.t), run.staleness.map((x) => x.behind), rolling(run.staleness.map((x) => x.behind), mean)]
  }
}

/**
 * The device timeline from first to last event: paused spans (the device is updating), buckets
 * with sampled tokens (generating), idle otherwise; weight swaps as marks. Fractions of the span.
 */
export const timelineOf = (run, now) => {
  const start = run.first
  const end = Math.max(run.last ?? 0, run.pausedAt === null ? 0 : now)
  if (start === null || end <= start) return { bands: [], marks: [] }
  const span = end - start
  const frac = (t) => Math.min(1, Math.max(0, (t - start) / span))
  const bands = []
  for (const [b, n] of run.tokenBuckets) if (n > 0) bands.push({ kind: "generating", from: frac(b), to: frac(b + BUCKET_S) })
  for (const p of run.pauses) bands.push({ kind: "paused", from: frac(p.from), to: frac(p.to) })
  if (run.pausedAt !== null) bands.push({ kind: "paused", from: frac(run.pausedAt), to: 1 })
  return { bands, marks: run.versions.map((v) => ({ at: frac(v.t), version: v.version })) }
}
