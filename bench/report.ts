/**
 * Writes one benchmark's results as `bench/results/NAME.json`, `NAME.md` (a Markdown table) and
 * `NAME.svg` (a grouped bar chart), so every benchmark reports the same three ways.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import os from "node:os"
import { fileURLToPath } from "node:url"

export interface Table {
  readonly columns: ReadonlyArray<string>
  readonly rows: ReadonlyArray<ReadonlyArray<string | number>>
}

/** Bars grouped by `groups[i].label`; every group has one bar per series name. */
export interface BarChart {
  readonly title: string
  readonly unit: string
  readonly groups: ReadonlyArray<{ readonly label: string; readonly bars: ReadonlyArray<{ readonly series: string; readonly value: number }> }>
}

export interface Report {
  readonly name: string
  readonly json: Record<string, unknown>
  readonly table: Table
  readonly chart: BarChart
  /** Free text put under the table (method, caveats). */
  readonly notes?: ReadonlyArray<string>
}

export const resultsDir = fileURLToPath(new URL("./results/", import.meta.url))

export const machine = () => ({
  cores: os.cpus().length,
  cpu: os.cpus()[0]?.model ?? "unknown",
  memory_gib: Math.round(os.totalmem() / 2 ** 30),
  node: process.version,
  platform: `${os.platform()}-${os.arch()}`
})

const fmt = (v: string | number) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : v)

export const markdownTable = (t: Table): string =>
  [
    `| ${t.columns.join(" | ")} |`,
    `| ${t.columns.map(() => "---").join(" | ")} |`,
    ...t.rows.map((r) => `| ${r.map(fmt).join(" | ")} |`)
  ].join("\n")

const palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]
const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

export const barChartSvg = (c: BarChart): string => {
  const series = [...new Set(c.groups.flatMap((g) => g.bars.map((b) => b.series)))]
  const max = Math.max(1e-12, ...c.groups.flatMap((g) => g.bars.map((b) => b.value)))
  const barW = 22, gap = 26, left = 70, top = 40, h = 260
  const groupW = series.length * barW + gap
  const width = left + c.groups.length * groupW + 20
  const height = top + h + 70 + series.length * 16
  const y = (v: number) => top + h - (v / max) * h
  const parts: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="20" font-size="14">${esc(c.title)}</text>`,
    `<line x1="${left}" y1="${top + h}" x2="${width - 10}" y2="${top + h}" stroke="#333"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${top + h}" stroke="#333"/>`
  ]
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4
    parts.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${fmt(Number(v.toPrecision(3)))}</text>`)
  }
  parts.push(`<text x="14" y="${top + h / 2}" transform="rotate(-90 14 ${top + h / 2})" text-anchor="middle">${esc(c.unit)}</text>`)
  c.groups.forEach((g, gi) => {
    const x0 = left + gap / 2 + gi * groupW
    g.bars.forEach((b) => {
      const si = series.indexOf(b.series)
      const x = x0 + si * barW
      parts.push(`<rect x="${x}" y="${y(b.value)}" width="${barW - 2}" height="${top + h - y(b.value)}" fill="${palette[si % palette.length]}"><title>${esc(b.series)}: ${fmt(b.value)}</title></rect>`)
    })
    parts.push(`<text x="${x0 + (series.length * barW) / 2}" y="${top + h + 16}" text-anchor="middle">${esc(g.label)}</text>`)
  })
  series.forEach((s, si) => {
    const ly = top + h + 40 + si * 16
    parts.push(`<rect x="${left}" y="${ly - 9}" width="10" height="10" fill="${palette[si % palette.length]}"/><text x="${left + 16}" y="${ly}">${esc(s)}</text>`)
  })
  parts.push("</svg>")
  return parts.join("\n")
}

/** Writes the report into `dir` (default bench/results/). */
export const writeReport = (r: Report, dir: string = resultsDir): void => {
  const to = dir.endsWith("/") ? dir : `${dir}/`
  mkdirSync(to, { recursive: true })
  const json = { ...r.json, machine: machine(), measured_at: new Date().toISOString() }
  writeFileSync(`${to}${r.name}.json`, JSON.stringify(json, null, 2) + "\n")
  const md = [`# ${r.name}`, "", markdownTable(r.table), "", ...(r.notes ?? []).map((n) => `- ${n}`), "", `Machine: ${JSON.stringify(machine())}`, ""]
  writeFileSync(`${to}${r.name}.md`, md.join("\n"))
  writeFileSync(`${to}${r.name}.svg`, barChartSvg(r.chart) + "\n")
  console.log(md.join("\n"))
  console.log(`wrote ${to}${r.name}.{json,md,svg}`)
}

/** Percentile over unsorted samples (nearest rank). */
export const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!
}
