/**
 * Reward and pass@1 over wall time, every mode on one chart: a line per mode through the mean
 * reward of each update's batch (at the time the version was published), the base policy's
 * test pass@1 at 0 and each mode's final pass@1 at its end (diamonds).
 */
import type { Mode } from "./records.js"

export interface Curve {
  readonly mode: Mode
  /** (seconds since the run started, mean reward of the update's batch) */
  readonly reward: ReadonlyArray<readonly [number, number]>
  readonly basePassAt1: number | null
  readonly finalPassAt1: number | null
  readonly wallS: number
}

const palette: Record<Mode, string> = { "sync": "#4e79a7", "collocated-drain": "#f28e2b", "collocated-interrupt": "#e15759", "split": "#59a14f" }
const f1 = (x: number) => Number(x.toFixed(1))

export const curvesSvg = (curves: ReadonlyArray<Curve>, title: string): string => {
  const left = 60, right = 20, top = 40, h = 260, width = 760
  const xMax = Math.max(1, ...curves.map((c) => c.wallS), ...curves.flatMap((c) => c.reward.map((p) => p[0])))
  const values = curves.flatMap((c) => [...c.reward.map((p) => p[1]), c.basePassAt1 ?? 0, c.finalPassAt1 ?? 0])
  const yMax = Math.max(0.1, ...values) * 1.1
  const x = (s: number) => left + (s / xMax) * (width - left - right)
  const y = (v: number) => top + h - (v / yMax) * h
  const parts: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${top + h + 80}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="20" font-size="14">${title}</text>`,
    `<line x1="${left}" y1="${top + h}" x2="${width - right}" y2="${top + h}" stroke="#333"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${top + h}" stroke="#333"/>`
  ]
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4
    parts.push(`<text x="${left - 6}" y="${f1(y(v) + 4)}" text-anchor="end">${v.toFixed(2)}</text>`)
    const s = (xMax * i) / 4
    parts.push(`<text x="${f1(x(s))}" y="${top + h + 15}" text-anchor="middle">${s.toFixed(0)}</text>`)
  }
  parts.push(`<text x="${width - right}" y="${top + h + 30}" text-anchor="end">wall seconds since the run started</text>`)
  parts.push(`<text x="14" y="${top + h / 2}" transform="rotate(-90 14 ${top + h / 2})" text-anchor="middle">reward / pass@1</text>`)
  const base = curves.find((c) => c.basePassAt1 !== null)?.basePassAt1 ?? null
  if (base !== null) parts.push(`<path d="M ${f1(x(0))} ${f1(y(base) - 6)} l 6 6 l -6 6 l -6 -6 z" fill="#333"><title>base pass@1 ${base.toFixed(3)}</title></path>`)
  curves.forEach((c, i) => {
    const color = palette[c.mode]
    if (c.reward.length > 0) {
      parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${c.reward.map(([s, v]) => `${f1(x(s))},${f1(y(v))}`).join(" ")}"/>`)
      for (const [s, v] of c.reward) parts.push(`<circle cx="${f1(x(s))}" cy="${f1(y(v))}" r="2.5" fill="${color}"/>`)
    }
    if (c.finalPassAt1 !== null) {
      parts.push(`<path d="M ${f1(x(c.wallS))} ${f1(y(c.finalPassAt1) - 6)} l 6 6 l -6 6 l -6 -6 z" fill="${color}" stroke="#333" stroke-width="0.5"><title>${c.mode}: final pass@1 ${c.finalPassAt1.toFixed(3)}</title></path>`)
    }
    const ly = top + h + 48, lx = left + i * 160
    parts.push(`<rect x="${lx}" y="${ly - 9}" width="10" height="10" fill="${color}"/><text x="${lx + 14}" y="${ly}">${c.mode}</text>`)
  })
  parts.push(`<text x="${left}" y="${top + h + 68}">lines: mean training reward of each update's batch; diamonds: test pass@1 of the final policy (black at 0: the base policy)</text>`)
  parts.push("</svg>")
  return parts.join("\n")
}
