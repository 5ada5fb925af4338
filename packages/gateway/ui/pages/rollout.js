// A rollout: what it is (task, group, state, reward), its attempts, its calls, the conversation
// as the harness saw it (any protocol), and its token view.
import { useEffect, useState } from "preact/hooks"
import { conversationOf } from "../conversation.js"
import { api, ErrorBox, fmtDuration, fmtReward, fmtTime, html, useFetched } from "../lib.js"
import { TokenView } from "./tokens.js"

const Turn = ({ t }) => html`<div class=${`turn ${t.role}`}>
  <div class="role">${t.role}${t.toolResultOf ? html` · result of <span class="mono">${t.toolResultOf}</span>` : ""}</div>
  ${t.reasoning ? html`<pre class="reasoning">${t.reasoning}</pre>` : null}
  ${t.text ? html`<pre>${t.text}</pre>` : null}
  ${t.toolCalls.map((c) => html`<pre class="tool-call">→ ${c.name}(${c.args}) <span class="mono">${c.id ?? ""}</span></pre>`)}
</div>`

const Conversation = ({ calls }) => {
  const shown = calls.filter((c) => c.request !== null)
  const [pick, setPick] = useState(shown.length - 1)
  if (shown.length === 0) return html`<p class="empty">No calls recorded.</p>`
  const call = shown[Math.min(pick, shown.length - 1)]
  return html`<div class="conversation" data-endpoint=${call.endpoint}>
    <label>Call <select onChange=${(e) => setPick(Number(e.target.value))} value=${Math.min(pick, shown.length - 1)}>
      ${shown.map((c, i) => html`<option value=${i}>#${c.seq} · ${c.endpoint} · ${c.status}</option>`)}
    </select></label>
    <span class="hint">the history the harness sent with this call, then the reply</span>
    ${call.status !== 200 ? html`<p class="error">This call failed: ${call.error}</p>` : null}
    ${conversationOf(call).map((t) => html`<${Turn} t=${t} />`)}
  </div>`
}

/** The attempt's captured logs, fetched when opened. */
const AttemptLog = ({ id }) => {
  const [state, setState] = useState(null)
  const open = (e) => {
    if (!e.target.open || state !== null) return
    setState({ loading: true })
    api(`/api/attempts/${encodeURIComponent(id)}/logs`).then((logs) => setState({ logs }), (error) => setState({ error }))
  }
  return html`<details class="attempt-log" data-attempt=${id} onToggle=${open}>
    <summary>Log</summary>
    ${state?.loading ? html`<p class="loading">Loading…</p>` : null}
    ${state?.error ? html`<${ErrorBox} error=${state.error} title="The log could not be read" />` : null}
    ${state?.logs && !state.logs.available ? html`<p class="hint">No captured log: ${state.logs.reason}.</p>` : null}
    ${(state?.logs?.logs ?? []).map(
      (l) => html`<div class="log" data-name=${l.name}><div class="hint">${l.name}.log · ${l.bytes} bytes${l.truncated ? " (its end)" : ""}</div><pre>${l.text || "(empty)"}</pre></div>`
    )}
  </details>`
}

const Attempts = ({ attempts }) => html`<table class="attempts">
  <thead><tr><th>#</th><th>Attempt</th><th>State</th><th>Exit / reason</th><th>Started</th><th>Finished</th><th>Captured log</th></tr></thead>
  <tbody>${attempts.map(
    (a) => html`<tr><td>${a.index}</td><td class="mono">${a.id}</td><td><span class=${`state ${a.state}`}>${a.state}</span></td><td>${a.reason ?? "–"}</td><td>${fmtTime(a.started_at)}</td><td>${fmtTime(a.finished_at)}</td><td><${AttemptLog} id=${a.id} /></td></tr>`
  )}</tbody>
</table>`

const Calls = ({ calls }) => html`<table class="calls">
  <thead><tr><th>Seq</th><th>Endpoint</th><th>Status</th><th>Prompt</th><th>Output</th><th>Finish</th><th>Reused</th><th>Break</th><th>Held</th><th>Took</th></tr></thead>
  <tbody>${calls.map(
    (c) => html`<tr><td>${c.seq}</td><td>${c.endpoint}</td><td>${c.status}${c.error ? html` <span class="hint">${c.error}</span>` : ""}</td><td class="num">${c.prompt_token_ids.length}</td><td class="num">${c.output_token_ids.length}</td><td>${c.finish_reason ?? "–"}</td><td class="num">${c.reuse.reused_tokens}</td><td>${c.reuse.break ?? "–"}</td><td class="num">${fmtDuration(c.timings.held_ms)}</td><td class="num">${fmtDuration(c.timings.finished_at - c.timings.received_at)}</td></tr>`
  )}</tbody>
</table>`

export const RolloutPage = ({ id }) => {
  const state = useFetched(id, () => {
    const path = `/api/rollouts/${encodeURIComponent(id)}`
    return Promise.all([api(path), api(`${path}/tokens`)])
  })
  if (state.error) return html`<h1>Rollout <span class="mono">${id}</span></h1><${ErrorBox} error=${state.error} title=${state.error.status === 404 ? "No such rollout" : "The rollout could not be loaded"} /><p><a href="#/rollouts">All rollouts</a></p>`
  if (state.loading) return html`<p class="loading">Loading…</p>`
  const [d, tokens] = state.value
  return html`<h1>Rollout <span class="mono">${d.id}</span></h1>
    <dl class="facts">
      <dt>State</dt><dd><span class=${`state ${d.state}`}>${d.state}</span></dd>
      <dt>Reward</dt><dd>${fmtReward(d.reward)}</dd>
      <dt>Group</dt><dd>${d.group ?? "–"}</dd>
      <dt>Created</dt><dd>${fmtTime(d.created_at)}</dd>
      <dt>Task</dt><dd><code>${JSON.stringify(d.task)}</code></dd>
    </dl>
    <h2>Attempts</h2><${Attempts} attempts=${d.attempts} />
    <h2>Conversation</h2><${Conversation} calls=${d.calls} />
    <h2>Calls</h2><${Calls} calls=${d.calls} />
    <h2>Tokens</h2><${TokenView} view=${tokens} />`
}
