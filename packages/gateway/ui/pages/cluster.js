// Cluster: the nodes (roles, address, up/down, since when, last heartbeat), the launchers' slots, and the
// Gateway's state (paused, held and in-flight calls, the served version) with its pause/resume
// controls — the dashboard's only writes — refreshed every few seconds.
import { useEffect, useState } from "preact/hooks"
import { api, ErrorBox, fmtTime, html } from "../lib.js"

/** How long ago, coarsely: the page refreshes every few seconds. */
const ago = (at) => {
  if (at === null) return "–"
  const s = Math.max(0, Math.round((Date.now() - at) / 1000))
  return s < 1 ? "now" : s < 120 ? `${s} s ago` : `${Math.round(s / 60)} min ago`
}

const Nodes = ({ cluster }) => {
  if (cluster === null) return html`<p class="loading">Loading…</p>`
  if (cluster.node === null) return html`<p class="hint" id="no-cluster">This Gateway runs without a cluster node (a bare <code>reins serve</code>): there are no nodes or launchers to show.</p>`
  return html`<table class="nodes" data-rows=${cluster.nodes.length}>
      <thead><tr><th>Node</th><th>Roles</th><th>Address</th><th>Status</th><th>Since</th><th>Last heartbeat</th><th>Actors</th></tr></thead>
      <tbody>${cluster.nodes.map(
        (n) => html`<tr><td class="mono">${n.id}${n.id === cluster.node ? " (this Gateway's)" : ""}</td><td>${n.roles.join(", ") || "–"}</td><td class="mono">${n.address || "–"}</td><td><span class=${`state ${n.status === "up" ? "succeeded" : "failed"}`}>${n.status}</span></td><td>${n.since ? fmtTime(n.since) : "–"}</td><td class="heartbeat" data-at=${n.last_heartbeat ?? ""}>${ago(n.last_heartbeat)}</td><td>${n.actors.join(", ") || "–"}</td></tr>`
      )}</tbody>
    </table>
    <h2>Launchers</h2>
    ${cluster.launchers === null
      ? html`<p class="hint" id="no-launchers">No rollout controller answered, so the launchers' slots are unknown.</p>`
      : html`<table class="launchers">
          <thead><tr><th>Node</th><th>Kind</th><th>Running</th><th>Free</th><th>Slots</th></tr></thead>
          <tbody>${cluster.launchers.map((l) => html`<tr><td class="mono">${l.node}</td><td>${l.kind}</td><td class="num">${l.running}</td><td class="num">${l.free}</td><td class="num">${l.max}</td></tr>`)}</tbody>
        </table>
        <p class="hint">Controller: ${cluster.controller.waiting} waiting, ${cluster.controller.running} running, ${cluster.controller.ended} ended.</p>`}`
}

const REFRESH_MS = 3000

export const ClusterPage = () => {
  const [state, setState] = useState(null)
  const [error, setError] = useState(null)
  const [busy, setBusy] = useState(false)
  const [cluster, setCluster] = useState(null)
  const load = () =>
    Promise.all([api("/api/gateway/state"), api("/api/cluster")]).then(([s, c]) => (setState(s), setCluster(c), setError(null)), setError)
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
    <h2>Nodes</h2>
    <${Nodes} cluster=${cluster} />`
}
