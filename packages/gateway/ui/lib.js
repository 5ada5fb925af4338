// The parts every page uses: htm bound to Preact, the admin API client, small formatters.
import { h } from "preact"
import { useEffect, useState } from "preact/hooks"
import htm from "htm"

export const html = htm.bind(h)

export class ApiError extends Error {
  constructor(status, message, code, param) {
    super(message)
    this.status = status
    this.code = code ?? null
    this.param = param ?? null
  }
}

/**
 * One admin API request with the session cookie. A 401 means the session went stale: the page
 * reloads /ui, which shows the login form saying so.
 */
export const api = async (path, init = {}) => {
  const res = await fetch(path, {
    credentials: "same-origin",
    ...init,
    headers: { accept: "application/json", ...(init.body === undefined ? {} : { "content-type": "application/json" }) }
  })
  let body = null
  try {
    body = await res.json()
  } catch {
    throw new ApiError(res.status, `The Gateway answered HTTP ${res.status} without JSON.`)
  }
  if (res.status === 401) {
    location.assign("/ui")
    throw new ApiError(401, body?.error?.message ?? "Your session has expired; log in again.", body?.error?.code)
  }
  if (!res.ok) throw new ApiError(res.status, body?.error?.message ?? `HTTP ${res.status}`, body?.error?.code, body?.error?.param)
  return body
}

// What `load()` resolved to for `key`: { loading: true } until it answers for this very key, then
// { value } or { error }. Remembering the key keeps a page from showing the previous key's data
// (e.g. the last rollout's, or the last page's rows) between a hash change and the new answer.
export const useFetched = (key, load) => {
  const [fetched, setFetched] = useState({ key: null })
  useEffect(() => {
    let live = true
    load().then(
      (value) => live && setFetched({ key, value }),
      (error) => live && setFetched({ key, error })
    )
    return () => (live = false)
  }, [key])
  return fetched.key === key ? fetched : { loading: true }
}

export const fmtReward = (r) => (r === null || r === undefined ? "–" : String(Math.round(r * 1000) / 1000))
export const fmtTime = (ms) => (ms === null || ms === undefined ? "–" : new Date(ms).toLocaleString())
export const fmtDuration = (ms) => (ms === null || ms === undefined ? "–" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`)
export const fmtVersions = (v) => (v.min === null ? "–" : v.min === v.max ? String(v.min) : `${v.min}–${v.max}`)
export const fmtTask = (t) => {
  const s = typeof t === "string" ? t : JSON.stringify(t)
  return s.length > 60 ? s.slice(0, 59) + "…" : s
}

export const ErrorBox = ({ error, title }) => html`<div class="error" role="alert" data-status=${error.status ?? ""}>
  <strong>${title ?? "Could not load this page"}</strong>
  <p>${error.message}</p>
</div>`

/** The hash route: `#/rollouts?state=failed` → { path: ["rollouts"], query }. */
export const currentRoute = () => {
  const hash = location.hash.replace(/^#\/?/, "")
  const at = hash.indexOf("?")
  const path = (at < 0 ? hash : hash.slice(0, at)).split("/").filter(Boolean).map(decodeURIComponent)
  return { path, query: new URLSearchParams(at < 0 ? "" : hash.slice(at + 1)) }
}
