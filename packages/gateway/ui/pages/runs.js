// Runs: live charts over wall time and updates, folded from the durable event stream
// (`/api/events`, replayed from the start, then live) — new events redraw without a reload.
import { useEffect, useRef, useState } from "preact/hooks"
import { Chart } from "../chart.js"
import { api, html } from "../lib.js"
import { chartsOf, emptyRun, foldEvent, timelineOf } from "../runsData.js"

const TYPES = ["rollout.created", "attempt.state", "call.recorded", "reward.recorded", "model.version", "gateway.paused", "gateway.resumed", "trainer.version", "evaluation"]

const evalText = (e) => (e.passAt1 === null ? "–" : `${(e.passAt1 * 100).toFixed(1)}% (v${e.version})`)

/** Redraw at most this often however fast events come. */
const REDRAW_MS = 300

const Timeline = ({ run }) => {
  const { bands, marks } = timelineOf(run, Date.now() / 1000)
  const pct = (x) => `${(x * 100).toFixed(2)}%`
  return html`<figure class="timeline" id="device-timeline">
    <figcaption>Device timeline <span class="hint">generating · paused for an update · idle; ▲ weight swaps</span></figcaption>
    <div class="track">
      ${bands.map((b) => html`<span class=${`band ${b.kind}`} style=${`left:${pct(b.from)};width:${pct(Math.max(0.002, b.to - b.from))}`}></span>`)}
      ${marks.map((m) => html`<span class="mark" style=${`left:${pct(m.at)}`} title=${`version ${m.version}`}>▲</span>`)}
    </div>
  </figure>`
}

export const RunsPage = () => {
  const run = useRef(emptyRun())
  const [tick, setTick] = useState(0)
  const [link, setLink] = useState("connecting")
  useEffect(() => {
    const source = new EventSource("/api/events")
    let timer = null
    const redraw = () => (timer ??= setTimeout(() => ((timer = null), setTick((n) => n + 1)), REDRAW_MS))
    const onEvent = (message) => {
      foldEvent(run.current, JSON.parse(message.data))
      redraw()
    }
    for (const t of TYPES) source.addEventListener(t, onEvent)
    source.addEventListener("error", (message) => {
      // The stream's own error event carries the store's message; a dropped connection has none.
      if (message.data) setLink(`error: ${JSON.parse(message.data).error.message}`)
      else if (source.readyState !== EventSource.CLOSED) setLink("reconnecting…")
      else {
        // The browser gives up on a refused stream (an expired session): asking the API once says
        // which — a 401 takes the page to the login form — and anything else is shown.
        setLink("closed (reload the page)")
        api("/api/gateway/state").catch((e) => setLink(`closed: ${e.message}`))
      }
    })
    source.addEventListener("open", () => setLink("live"))
    return () => {
      clearTimeout(timer)
      source.close()
    }
  }, [])
  const r = run.current
  const charts = chartsOf(r)
  const latest = r.versions.length ? r.versions[r.versions.length - 1].version : "–"
  return html`<h1>Runs</h1>
    <p class="status" data-tick=${tick}>Event stream: <span id="stream-state">${link}</span> · ${r.events} events</p>
    <div class="cards">
      <div class="card"><span>Policy version</span><strong id="current-version">${latest}</strong></div>
      <div class="card"><span>Versions published</span><strong id="versions-count">${r.versions.length}</strong></div>
      <div class="card"><span>Rollouts</span><strong>${r.rollouts}</strong></div>
      <div class="card"><span>Succeeded / failed</span><strong>${r.ended.succeeded} / ${r.ended.failed}</strong></div>
      <div class="card"><span>Updates (pauses)</span><strong>${r.updates.length}</strong></div>
      <div class="card"><span>Test pass@1 (latest)</span><strong id="latest-eval">${r.evaluations.length ? evalText(r.evaluations[r.evaluations.length - 1]) : "–"}</strong></div>
    </div>
    <div class="charts">
      <${Chart} id="chart-reward" title="Reward (mean of the last 16) and pass rate (reward > 0)" data=${charts.reward} series=${["reward", "pass rate"]} />
      <${Chart} id="chart-versions" title="Policy version published" data=${charts.versions} series=${["version"]} />
      <${Chart} id="chart-updates" title="Per update: paused seconds and held calls" data=${charts.updates} series=${["paused s", "held calls"]} time=${false} xLabel="update" />
      <${Chart} id="chart-tokens" title="Tokens sampled per second" data=${charts.tokens} series=${["tokens/s"]} />
      <${Chart} id="chart-evaluations" title="Test pass@1 of evaluations, by version (sampled, greedy)" data=${charts.evaluations} series=${["pass@1", "greedy"]} time=${false} xLabel="version" />
      <${Chart} id="chart-trained" title="Tokens trained per second, by update (all, actions)" data=${charts.trained} series=${["tokens/s", "action tokens/s"]} time=${false} xLabel="version" />
      <${Chart} id="chart-trained-staleness" title="Staleness of the trained tokens, by update (mean, max)" data=${charts.trainedStaleness} series=${["mean", "max"]} time=${false} xLabel="version" />
      <${Chart} id="chart-staleness" title="Staleness: versions the oldest token of each ended rollout is behind the latest" data=${charts.staleness} series=${["versions behind", "mean of 16"]} />
    </div>
    <${Timeline} run=${r} />`
}
