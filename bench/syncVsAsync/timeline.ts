/**
 * The device timeline of one mode — the picture that makes the schedules obvious. Rows: the
 * device(s) on top (generating, training, paused / weight swap), then rollout slots (a rollout
 * takes the lowest slot free when it starts). Bars: a rollout from start to end, its model calls'
 * generation in dark, calls held at the pause gate in red; rollouts that ran across an update
 * (tokens of two versions: partial rollouts carried over) in orange, rollouts never trained (still
 * running when the run ended, or failed) in grey. Thin lines mark each new version.
 */
import { stalls, subtract, union } from "./figures.js"
import type { Interval, ModeRecords } from "./records.js"

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
const f1 = (x: number) => Number(x.toFixed(1))

/** Greedy interval partitioning in start order: each span gets the lowest slot free at its start. */
export const assignSlots = (spans: ReadonlyArray<Interval>): Array<number> => {
  const order = spans.map((s, i) => ({ ...s, i })).sort((a, b) => a.start - b.start || a.i - b.i)
  const freeAt: Array<number> = []
  const slots = new Array<number>(spans.length)
  for (const s of order) {
    let k = freeAt.findIndex((t) => t <= s.start)
    if (k === -1) k = freeAt.length
    freeAt[k] = s.end
    slots[s.i] = k
  }
  return slots
}

const colors = {
  trained: "#a6c8e8",
  carried: "#f6b26b",
  untrained: "#d9d9d9",
  generating: "#1f4e79",
  held: "#d62728",
  training: "#2ca02c",
  paused: "#eeeeee",
  sync: "#9467bd"
} as const

export const timelineSvg = (r: ModeRecords, title: string): string => {
  const t0 = r.t0, t1 = Math.max(r.tEnd, t0 + 1)
  const rollouts = r.rollouts.filter((x) => x.startedAt !== null && x.startedAt < t1)
  const spans = rollouts.map((x) => ({ start: x.startedAt!, end: Math.min(x.finishedAt ?? t1, t1) }))
  const slots = assignSlots(spans)
  const slotCount = Math.max(0, ...slots.map((s) => s + 1))
  const deviceRows = r.devices === 2 ? ["generation device", "training device"] : ["device"]
  const left = 130, right = 20, top = 40, rowH = 12, gap = 3, width = 1100
  const rows = deviceRows.length + slotCount
  const plotH = rows * (rowH + gap) + 10
  const legendY = top + plotH + 34
  const height = legendY + 30
  const x = (t: number) => left + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * (width - left - right)
  const rowY = (i: number) => top + i * (rowH + gap)
  const bar = (a: number, b: number, row: number, fill: string, tip?: string, inset = 0) => {
    const xa = x(a), xb = x(b)
    if (xb - xa <= 0) return ""
    const t = tip === undefined ? "" : `<title>${esc(tip)}</title>`
    return `<rect x="${f1(xa)}" y="${f1(rowY(row) + inset)}" width="${f1(Math.max(0.5, xb - xa))}" height="${f1(rowH - 2 * inset)}" fill="${fill}">${t}</rect>`
  }
  const parts: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="20" font-size="14">${esc(title)}</text>`
  ]
  // Paused / swapping periods shade the whole plot.
  const stops = stalls(r)
  for (const p of stops) parts.push(`<rect x="${f1(x(p.start))}" y="${top - 4}" width="${f1(Math.max(0.5, x(p.end) - x(p.start)))}" height="${plotH}" fill="${colors.paused}"/>`)
  deviceRows.forEach((name, i) => parts.push(`<text x="${left - 6}" y="${rowY(i) + rowH - 2}" text-anchor="end" font-weight="bold">${name}</text>`))
  if (slotCount > 0) parts.push(`<text x="${left - 6}" y="${rowY(deviceRows.length) + rowH - 2}" text-anchor="end">rollout slots</text>`)

  // A call's generation, without the pauses that interrupted it.
  const generating = (c: (typeof rollouts)[number]["calls"][number]) => (c.startedAt === null ? [] : subtract(c.startedAt, c.finishedAt, stops))
  // Device rows: generation = union of every call's generation; training = the updates.
  const gen = union(rollouts.flatMap((x) => x.calls.flatMap(generating)))
  for (const g of gen) parts.push(bar(g.start, g.end, 0, colors.generating))
  const trainRow = r.devices === 2 ? 1 : 0
  for (const t of r.trains) parts.push(bar(t.start, t.end, trainRow, colors.training, `update: ${((t.end - t.start) / 1000).toFixed(2)} s, ${t.tokens} tokens`))
  for (const s of r.syncs) parts.push(bar(s.start, s.end, 0, colors.sync, `weight swap: ${((s.end - s.start) / 1000).toFixed(2)} s`))

  rollouts.forEach((ro, i) => {
    const row = deviceRows.length + slots[i]!
    const versions = ro.calls.flatMap((c) => (c.minVersion === null ? [] : [c.minVersion, c.maxVersion!]))
    const carried = versions.length > 0 && Math.min(...versions) !== Math.max(...versions)
    const fill = !ro.trained ? colors.untrained : carried ? colors.carried : colors.trained
    const end = Math.min(ro.finishedAt ?? t1, t1)
    const tip = `${ro.id}: ${((end - ro.startedAt!) / 1000).toFixed(1)} s, ${ro.calls.length} calls, reward ${ro.reward ?? "none"}, ${ro.trained ? "trained" : `not trained (${ro.state})`}${carried ? `, versions ${Math.min(...versions)}–${Math.max(...versions)}` : ""}`
    parts.push(bar(ro.startedAt!, end, row, fill, tip))
    for (const c of ro.calls) {
      if (c.heldMs > 0 && c.startedAt !== null) parts.push(bar(c.receivedAt, c.startedAt, row, colors.held, undefined, 2))
      for (const g of generating(c)) parts.push(bar(g.start, g.end, row, colors.generating, undefined, 2))
    }
  })

  // Versions and the time axis.
  for (const v of r.versions) {
    const vx = f1(x(v.at))
    parts.push(`<line x1="${vx}" y1="${top - 4}" x2="${vx}" y2="${top + plotH - 6}" stroke="#2ca02c" stroke-width="0.8" stroke-dasharray="2,2"/>`)
    parts.push(`<text x="${vx}" y="${top - 7}" text-anchor="middle" font-size="9" fill="#2ca02c">v${v.version}</text>`)
  }
  const axisY = top + plotH
  parts.push(`<line x1="${left}" y1="${axisY}" x2="${width - right}" y2="${axisY}" stroke="#333"/>`)
  const span = (t1 - t0) / 1000
  const step = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600].find((s) => span / s <= 12) ?? 1200
  for (let s = 0; s <= span + 1e-9; s += step) {
    const tx = f1(x(t0 + s * 1000))
    parts.push(`<line x1="${tx}" y1="${axisY}" x2="${tx}" y2="${axisY + 4}" stroke="#333"/><text x="${tx}" y="${axisY + 15}" text-anchor="middle">${s}</text>`)
  }
  parts.push(`<text x="${width - right}" y="${axisY + 28}" text-anchor="end">seconds since the run started</text>`)
  const legend: Array<[string, string]> = [
    ["generating", colors.generating],
    ["training (update)", colors.training],
    ...(r.mode === "split" ? [["weight swap", colors.sync] as [string, string]] : []),
    ["paused", colors.paused],
    ["held call", colors.held],
    ["rollout (trained)", colors.trained],
    ["partial rollout (ran across an update)", colors.carried],
    ["rollout not trained", colors.untrained]
  ]
  let lx = left
  for (const [name, fill] of legend) {
    parts.push(`<rect x="${lx}" y="${legendY}" width="10" height="10" fill="${fill}" stroke="#999" stroke-width="0.5"/><text x="${lx + 14}" y="${legendY + 9}">${esc(name)}</text>`)
    lx += 24 + name.length * 6
  }
  parts.push("</svg>")
  return parts.join("\n")
}
