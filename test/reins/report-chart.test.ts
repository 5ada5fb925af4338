/** The run report's chart: values outside 0..1 (a verifier's negative rewards) widen the axis instead of being drawn clipped. */
import { describe, expect, it } from "vitest"
import { lineChartSvg } from "../../packages/reins/src/run/report.js"

const labels = (svg: string) => [...svg.matchAll(/text-anchor="end" font-size="11">(-?\d+)%</g)].map((m) => Number(m[1]))
const gridY = (svg: string, label: number) => Number(new RegExp(`y="([\\d.]+)" text-anchor="end" font-size="11">${label}%<`).exec(svg)![1]) - 4
const pathYs = (svg: string) => [...svg.matchAll(/<path d="([^"]+)"/g)].map((m) => m[1]!.split(" ").map((p) => Number(p.slice(1).split(",")[1])))

describe("lineChartSvg", () => {
  it("draws 0..1 with five grid lines", () => {
    const svg = lineChartSvg("t", [{ name: "reward", color: "#000", points: [[0, 0], [10, 0.5], [20, 1]] }])
    expect(labels(svg)).toEqual([0, 25, 50, 75, 100])
    expect(pathYs(svg)[0]).toEqual([gridY(svg, 0), gridY(svg, 50), gridY(svg, 100)].map((v) => Number(v.toFixed(1))))
  })

  it("widens the axis to a negative reward and draws it below 0, not on it", () => {
    const svg = lineChartSvg("t", [{ name: "reward", color: "#000", points: [[0, 0.2], [10, -0.17], [20, 0.4]] }])
    expect(labels(svg)).toEqual([-25, 0, 25, 50, 75, 100])
    const [, negative] = pathYs(svg)[0]!
    expect(negative!).toBeGreaterThan(gridY(svg, 0))
    expect(negative!).toBeLessThan(gridY(svg, -25))
  })

  it("keeps about five grid lines for a wide range, 0 among them", () => {
    const svg = lineChartSvg("t", [{ name: "reward", color: "#000", points: [[0, -1], [10, 3]] }])
    expect(labels(svg)).toEqual([-100, 0, 100, 200, 300])
  })
})
