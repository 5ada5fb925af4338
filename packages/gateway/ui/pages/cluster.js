// Cluster: the Gateway's state (paused, held and in-flight calls, the served version) with its
// pause/resume controls — the dashboard's only writes — refreshed every few seconds.
import { useEffect, useState } from "preact/hooks"
import { api, ErrorBox, html } from "../lib.js"

const REFRESH_MS = 3000

export const ClusterPage = () => {
  const [state, setState] = useState(null)
  const [error, setError] = useState(null)
  const [busy, setBusy] = useState(false)
  const load = () => api("/api/gateway/state").then((s) => (setState(s), setError(null)), setError)
  useEffect(() => {
    load()
    const timer = setInterval(load, REFRESH_MS)
    return () => clearInterval(timer)
  }, [])
  const act = (what) => {
    setBusy(true)
    api(`/api/gateway/${what}`, { method: "POST", body: what === "pause" ? JSON.stringify({ mode: "drain" }) : "{}" })
      .then((s) => (setState(s), setError(null)), setError)
      .finally(() => setBusy(false))
  }
  return html`<h1>Cluster</h1>
    ${error ? html`<${ErrorBox} error=${error} title="The Gateway's state could not be read" />` : null}
    <h2>Gateway</h2>
    ${state
      ? html`<dl class="facts" id="gateway-state" data-paused=${String(state.paused)}>
            <dt>State</dt><dd><span class=${`state ${state.paused ? "failed" : "succeeded"}`}>${state.paused ? `paused (${state.mode})` : "serving"}</span></dd>
            <dt>Model</dt><dd class="mono">${state.model}</dd>
            <dt>Version</dt><dd>${state.version}</dd>
            <dt>Held calls</dt><dd>${state.held}</dd>
            <dt>In flight</dt><dd>${state.in_flight}</dd>
            <dt>Paused in all</dt><dd>${state.paused_seconds.toFixed(1)} s</dd>
          </dl>
          <p>
            <button type="button" id="pause" disabled=${busy || state.paused} onClick=${() => act("pause")}>Pause (drain)</button>
            <button type="button" id="resume" disabled=${busy || !state.paused} onClick=${() => act("resume")}>Resume</button>
            <span class="hint">A pause holds new model calls (they wait, they do not fail) until resumed.</span>
          </p>`
      : html`<p class="loading">Loading…</p>`}
    <h2>Nodes and launchers</h2>
    <p class="hint">This Gateway's admin API does not report the cluster's nodes or launchers yet; <code>reins status --join ws://HOST:PORT</code> lists the nodes.</p>`
}
