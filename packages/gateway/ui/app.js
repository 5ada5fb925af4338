// The dashboard app: a nav bar and the page the URL's hash names (Runs, Rollouts, a rollout, Cluster).
import { render } from "preact"
import { useEffect, useState } from "preact/hooks"
import { currentRoute, html } from "./lib.js"
import { ClusterPage } from "./pages/cluster.js"
import { RolloutPage } from "./pages/rollout.js"
import { RolloutsPage } from "./pages/rollouts.js"
import { RunsPage } from "./pages/runs.js"

const NAV = [
  ["runs", "Runs"],
  ["rollouts", "Rollouts"],
  ["cluster", "Cluster"]
]

const NotFound = ({ path }) => html`<div class="error" role="alert"><strong>No such page</strong><p>The dashboard has no page “${path.join("/")}”. Pick one above.</p></div>`

const page = (route) => {
  const [first, second, ...rest] = route.path
  if (first === undefined || (first === "runs" && second === undefined)) return html`<${RunsPage} />`
  if (first === "rollouts" && second === undefined) return html`<${RolloutsPage} query=${route.query} />`
  if (first === "rollouts" && rest.length === 0) return html`<${RolloutPage} id=${second} />`
  if (first === "cluster" && second === undefined) return html`<${ClusterPage} />`
  return html`<${NotFound} path=${route.path} />`
}

const App = () => {
  const [route, setRoute] = useState(currentRoute())
  useEffect(() => {
    const onHash = () => setRoute(currentRoute())
    addEventListener("hashchange", onHash)
    return () => removeEventListener("hashchange", onHash)
  }, [])
  const active = route.path[0] ?? "runs"
  return html`<header class="top">
      <span class="brand">reins</span>
      <nav>${NAV.map(([id, label]) => html`<a href=${`#/${id}`} class=${active === id ? "active" : ""}>${label}</a>`)}</nav>
      <form method="post" action="/ui/logout"><button class="link" type="submit">Log out</button></form>
    </header>
    <main class="page">${page(route)}</main>`
}

// The shell's "Loading…" placeholder goes: Preact renders next to what a container holds.
const root = document.getElementById("app")
root.replaceChildren()
render(html`<${App} />`, root)
