// A uPlot chart that follows its data: created once, `setData` on every change, resized with its box.
import { useEffect, useRef } from "preact/hooks"
import uPlot from "uplot"
import { html } from "./lib.js"

const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea"]

/** `data` is uPlot's [xs, ...ys]; `series` names the ys; `time` makes x wall time (seconds). */
export const Chart = ({ id, title, data, series, time = true, xLabel }) => {
  const box = useRef(null)
  const plot = useRef(null)
  useEffect(() => {
    const width = Math.max(300, box.current.clientWidth)
    plot.current = new uPlot(
      {
        width,
        height: 200,
        scales: { x: { time } },
        axes: [{ label: xLabel }, {}],
        series: [{ label: xLabel ?? "time" }, ...series.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 2, points: { show: true, size: 4 } }))]
      },
      data,
      box.current
    )
    const el = box.current
    // A resize may be delivered after the page has moved on: the chart is gone by then.
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(300, el.clientWidth), height: 200 }))
    resize.observe(el)
    return () => {
      resize.disconnect()
      plot.current.destroy()
      plot.current = null
    }
  }, [])
  useEffect(() => plot.current?.setData(data), [data])
  const n = data[0].length
  return html`<figure class="chart" id=${id} data-points=${n} data-last=${n > 0 ? data[1][n - 1] : ""}>
    <figcaption>${title}${data[0].length === 0 ? html` <span class="hint">(no data yet)</span>` : null}</figcaption>
    <div ref=${box}></div>
  </figure>`
}
