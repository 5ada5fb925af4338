/**
 * The predicted curves as an SVG: rollouts/s per device against devices (evenly spaced, as the
 * device counts grow geometrically), one colour per schedule, one dash pattern per tail, and the
 * measured points of the small real runs as dots when there are any. Kept in the style of
 * bench/report.ts's bar chart (plain strings, no library).
 */
export interface Curve {
  readonly series: string
  readonly tail: number
  /** One value per x label, NaN where there is none. */
  readonly values: ReadonlyArray<number>
}

export interface LineChart {
  readonly title: string
  readonly unit: string
  readonly xLabels: ReadonlyArray<string>
  readonly curves: ReadonlyArray<Curve>
  readonly points?: ReadonlyArray<{ readonly series: string; readonly x: number; readonly value: number }>
}

const palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"]
const dashes = ["", "6 4", "2 3", "10 3 2 3"]
const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

export const lineChartSvg = (c: LineChart): string => {
  const series = [...new Set(c.curves.map((k) => k.series))]
  const tails = [...new Set(c.curves.map((k) => k.tail))]
  const all = [...c.curves.flatMap((k) => k.values), ...(c.points ?? []).map((p) => p.value)].filter(Number.isFinite)
  const max = Math.max(1e-12, ...all) * 1.05
  const left = 70, top = 40, w = 120 * Math.max(1, c.xLabels.length - 1), h = 280
  const width = left + w + 220, height = top + h + 50
  const x = (i: number) => left + (c.xLabels.length > 1 ? (i * w) / (c.xLabels.length - 1) : w / 2)
  const y = (v: number) => top + h - (v / max) * h
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="20" font-size="14">${esc(c.title)}</text>`,
    `<line x1="${left}" y1="${top + h}" x2="${left + w}" y2="${top + h}" stroke="#333"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${top + h}" stroke="#333"/>`,
    `<text x="14" y="${top + h / 2}" transform="rotate(-90 14 ${top + h / 2})" text-anchor="middle">${esc(c.unit)}</text>`,
    `<text x="${left + w / 2}" y="${top + h + 36}" text-anchor="middle">devices</text>`
  ]
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4
    parts.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${Number(v.toPrecision(3))}</text>`)
  }
  c.xLabels.forEach((l, i) => parts.push(`<text x="${x(i)}" y="${top + h + 16}" text-anchor="middle">${esc(l)}</text>`))
  for (const k of c.curves) {
    const pts = k.values.map((v, i) => (Number.isFinite(v) ? `${x(i).toFixed(1)},${y(v).toFixed(1)}` : "")).filter((p) => p !== "")
    const colour = palette[series.indexOf(k.series) % palette.length]!
    const dash = dashes[tails.indexOf(k.tail) % dashes.length]!
    parts.push(`<polyline points="${pts.join(" ")}" fill="none" stroke="${colour}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""}><title>${esc(`${k.series}, tail ${k.tail}`)}</title></polyline>`)
  }
  for (const p of c.points ?? []) {
    const colour = palette[series.indexOf(p.series) % palette.length] ?? "#000"
    parts.push(`<circle cx="${x(p.x)}" cy="${y(p.value)}" r="5" fill="none" stroke="${colour}" stroke-width="2"><title>${esc(`${p.series} measured: ${p.value}`)}</title></circle>`)
  }
  const lx = left + w + 20
  series.forEach((s, i) => parts.push(`<rect x="${lx}" y="${top + i * 16}" width="14" height="4" fill="${palette[i % palette.length]}"/><text x="${lx + 20}" y="${top + i * 16 + 5}">${esc(s)}</text>`))
  tails.forEach((t, i) => {
    const ly = top + (series.length + 1 + i) * 16
    const dash = dashes[i % dashes.length]!
    parts.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 14}" y2="${ly}" stroke="#333" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""}/><text x="${lx + 20}" y="${ly + 4}">tail ×${t}</text>`)
  })
  if ((c.points ?? []).length > 0) {
    const ly = top + (series.length + tails.length + 2) * 16
    parts.push(`<circle cx="${lx + 7}" cy="${ly}" r="5" fill="none" stroke="#333" stroke-width="2"/><text x="${lx + 20}" y="${ly + 4}">measured</text>`)
  }
  parts.push("</svg>")
  return parts.join("\n")
}
