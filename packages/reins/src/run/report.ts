/**
 * The run's report for people: `report.md` (the summary and a table per version) and
 * `report.svg` (training reward and pass rate over wall time, with base and final test pass@1).
 */
import { VersionMetrics } from "@reins/protocol"
import { readJsonl } from "@reins/trainer"
import { Effect } from "effect"
import { writeFileSync } from "node:fs"
import path from "node:path"
import type { RunSummaryFile } from "./train.js"

export const pct = (x: number | null | undefined) => (x === null || x === undefined ? "n/a" : `${(100 * x).toFixed(1)}%`)

interface Series {
  readonly name: string
  readonly color: string
  readonly points: ReadonlyArray<readonly [number, number]>
  readonly dots?: boolean
}

/**
 * A small line chart: x = wall seconds, y = 0..1, widened to any value outside it (a verifier may
 * give negative rewards, or more than 1): a value is never drawn clipped.
 */
export const lineChartSvg = (title: string, series: ReadonlyArray<Series>): string => {
  const w = 640
  const h = 320
  const m = { l: 48, r: 150, t: 32, b: 40 }
  const ys = series.flatMap((s) => s.points.map((p) => p[1])).filter(Number.isFinite)
  const lo = Math.min(0, ...ys)
  const hi = Math.max(1, ...ys)
  // About five grid lines whatever the range, on multiples of the step (so 0 is always one).
  const step = Math.ceil((hi - lo) / 1.25) / 4
  const yLo = Math.floor(lo / step) * step
  const yHi = Math.ceil(hi / step) * step
  const xMax = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[0])))
  const x = (v: number) => m.l + (v / xMax) * (w - m.l - m.r)
  const y = (v: number) => h - m.b - ((v - yLo) / (yHi - yLo)) * (h - m.t - m.b)
  const grid = Array.from({ length: Math.round((yHi - yLo) / step) + 1 }, (_, i) => yLo + i * step)
    .map((g) => {
      const gy = y(g).toFixed(1)
      return `<line x1="${m.l}" x2="${w - m.r}" y1="${gy}" y2="${gy}" stroke="#ddd"/><text x="${m.l - 6}" y="${(y(g) + 4).toFixed(1)}" text-anchor="end" font-size="11">${Math.round(g * 100)}%</text>`
    })
    .join("")
  const lines = series
    .map((s, i) => {
      const path = s.points.map((p, j) => `${j === 0 ? "M" : "L"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ")
      const dots = s.dots ? s.points.map((p) => `<circle cx="${x(p[0])}" cy="${y(p[1])}" r="4" fill="${s.color}"/>`).join("") : ""
      const legend = `<rect x="${w - m.r + 12}" y="${m.t + i * 18}" width="12" height="3" fill="${s.color}"/><text x="${w - m.r + 28}" y="${m.t + i * 18 + 5}" font-size="11">${s.name}</text>`
      return `${s.dots ? "" : `<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"/>`}${dots}${legend}`
    })
    .join("")
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif">` +
    `<rect width="${w}" height="${h}" fill="white"/><text x="${m.l}" y="20" font-size="13">${title}</text>${grid}${lines}` +
    `<text x="${(m.l + w - m.r) / 2}" y="${h - 8}" text-anchor="middle" font-size="11">wall time (s), 0 … ${xMax.toFixed(0)}</text></svg>`
}

export const writeRunReport = (runDir: string, summary: RunSummaryFile) =>
  Effect.gen(function*() {
    const metrics = yield* readJsonl(path.join(runDir, "metrics.jsonl"), VersionMetrics)
    let wall = 0
    const rows = metrics.map((m) => {
      wall += m.wallSeconds
      return { m, wall }
    })
    const evalAt = (x: number | null, at: number): ReadonlyArray<readonly [number, number]> => (x === null ? [] : [[at, x]])
    const svg = lineChartSvg(`${summary.run_id}: training reward and test pass@1`, [
      { name: "train reward", color: "#1f77b4", points: rows.map((r) => [r.wall, r.m.reward.mean ?? 0] as const) },
      { name: "train pass rate", color: "#ff7f0e", points: rows.map((r) => [r.wall, r.m.reward.passRate ?? 0] as const) },
      {
        name: "test pass@1",
        color: "#2ca02c",
        dots: true,
        points: [...evalAt(summary.base_pass_at_1, 0), ...evalAt(summary.final_pass_at_1, wall)]
      },
      {
        name: "test greedy pass@1",
        color: "#d62728",
        dots: true,
        points: [...evalAt(summary.base_greedy_pass_at_1, 0), ...evalAt(summary.final_greedy_pass_at_1, wall)]
      }
    ])
    const table = rows.map(({ m, wall }) =>
      `| ${m.version} | ${wall.toFixed(0)} | ${m.reward.mean?.toFixed(3) ?? "n/a"} | ${pct(m.reward.passRate)} | ${m.used.rollouts} | ${m.used.actionTokens} | ${m.staleness.max} | ${m.pause.pauseSeconds.toFixed(2)} | ${pct(m.device.generating)} / ${pct(m.device.training)} / ${pct(m.device.idle)} |`
    )
    const md = [
      `# ${summary.run_id}`,
      "",
      `Schedule \`${summary.schedule}\`, ${summary.versions} versions, ${summary.wall_s.toFixed(0)} s wall (${summary.train_wall_s.toFixed(0)} s training), ${summary.harness_errors} harness errors, ${summary.context_full_calls} calls refused at the model's context limit (episodes that ended there).`,
      "",
      "| | base | final |",
      "|---|---|---|",
      `| test pass@1 (sampled) | ${pct(summary.base_pass_at_1)} | ${pct(summary.final_pass_at_1)} |`,
      `| test pass@1 (greedy) | ${pct(summary.base_greedy_pass_at_1)} | ${pct(summary.final_greedy_pass_at_1)} |`,
      "",
      `${summary.test_tasks} test tasks. ![reward and pass@1](report.svg)`,
      "",
      "| version | wall s | reward | pass rate | rollouts | action tokens | max staleness | pause s | device gen / train / idle |",
      "|---|---|---|---|---|---|---|---|---|",
      ...table,
      ""
    ].join("\n")
    yield* Effect.sync(() => {
      writeFileSync(path.join(runDir, "report.svg"), svg)
      writeFileSync(path.join(runDir, "report.md"), md)
    })
  }).pipe(Effect.orDie)
