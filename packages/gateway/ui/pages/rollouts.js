// Rollouts: a table of rollouts, newest first, filtered and paged by the server (cursor pages of
// `limit` rows; the filters and cursor live in the URL's hash, so a view can be linked).
import { api, ErrorBox, fmtDuration, fmtReward, fmtTask, fmtVersions, html, useFetched } from "../lib.js"

const FILTERS = ["state", "group", "version", "min_reward", "max_reward", "limit"]
const STATES = ["", "queued", "running", "succeeded", "failed", "cancelled"]

const go = (params) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v)
  location.hash = `#/rollouts${q.size ? `?${q}` : ""}`
}

const Filters = ({ query }) => {
  const submit = (e) => {
    e.preventDefault()
    go(Object.fromEntries(FILTERS.map((k) => [k, e.target.elements[k].value.trim()])))
  }
  return html`<form class="filters" onSubmit=${submit}>
    <label>State <select name="state" value=${query.get("state") ?? ""}>${STATES.map((s) => html`<option value=${s}>${s || "any"}</option>`)}</select></label>
    <label>Group <input name="group" value=${query.get("group") ?? ""} size="10" /></label>
    <label>Version <input name="version" value=${query.get("version") ?? ""} size="4" /></label>
    <label>Reward ≥ <input name="min_reward" value=${query.get("min_reward") ?? ""} size="4" /></label>
    <label>≤ <input name="max_reward" value=${query.get("max_reward") ?? ""} size="4" /></label>
    <label>Per page <input name="limit" value=${query.get("limit") ?? ""} size="4" placeholder="50" /></label>
    <button type="submit">Filter</button>
    <button type="button" class="link" onClick=${() => go({})}>Clear</button>
  </form>`
}

const Row = ({ r }) => html`<tr data-id=${r.id}>
  <td><a href=${`#/rollouts/${r.id}`} class="mono">${r.id}</a></td>
  <td><span class=${`state ${r.state}`}>${r.state}</span></td>
  <td class="task" title=${JSON.stringify(r.task)}>${fmtTask(r.task)}</td>
  <td>${r.group ?? "–"}</td>
  <td class="num" data-col="reward">${fmtReward(r.reward)}</td>
  <td class="num">${r.attempts}</td>
  <td class="num" data-col="calls">${r.calls}</td>
  <td class="num" data-col="tokens">${r.output_tokens}</td>
  <td class="num">${fmtDuration(r.duration_ms)}</td>
  <td class="num">${fmtVersions(r.versions)}</td>
</tr>`

export const RolloutsPage = ({ query }) => {
  const key = query.toString()
  const state = useFetched(key, () => api(`/api/rollouts${key ? `?${key}` : ""}`))
  const params = Object.fromEntries(query.entries())
  return html`<h1>Rollouts</h1>
    <${Filters} query=${query} />
    ${state.error ? html`<${ErrorBox} error=${state.error} title="The rollouts could not be listed" />` : null}
    ${state.loading ? html`<p class="loading">Loading…</p>` : null}
    ${state.value
      ? html`<table class="rollouts" data-query=${key} data-rows=${state.value.data.length}>
            <thead><tr><th>Rollout</th><th>State</th><th>Task</th><th>Group</th><th>Reward</th><th>Attempts</th><th>Calls</th><th>Tokens</th><th>Duration</th><th>Versions</th></tr></thead>
            <tbody>${state.value.data.map((r) => html`<${Row} r=${r} key=${r.id} />`)}</tbody>
          </table>
          ${state.value.data.length === 0 ? html`<p class="empty">No rollouts match.</p>` : null}
          <div class="pager">
            ${params.cursor ? html`<button type="button" id="first-page" onClick=${() => go({ ...params, cursor: undefined })}>← First page</button>` : null}
            ${state.value.next_cursor ? html`<button type="button" id="next-page" onClick=${() => go({ ...params, cursor: state.value.next_cursor })}>Next page →</button>` : null}
          </div>`
      : null}`
}
