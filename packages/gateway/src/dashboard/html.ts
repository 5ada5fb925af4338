/**
 * The dashboard's server-rendered pages: the login form, the app's shell, and the error page for
 * what the app cannot show (an unknown /ui path). Everything else renders in the browser from the
 * admin API. Pages carry a Content-Security-Policy allowing only this origin's scripts and the
 * import map (by its hash).
 */
import { createHash } from "node:crypto"
import { IMPORT_MAP } from "./assets.js"

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

const importMap = JSON.stringify(IMPORT_MAP)
const importMapHash = createHash("sha256").update(importMap).digest("base64")

export const CSP = `default-src 'self'; script-src 'self' 'sha256-${importMapHash}'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'`

const page = (title: string, body: string, head = "") => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)} · reins</title>
<link rel="stylesheet" href="/ui/assets/style.css">
${head}
</head>
<body>
${body}
</body>
</html>
`

/** The login form; `notice` says why it is shown again (wrong token, expired session). */
export const loginPage = (notice: string | null) =>
  page(
    "Log in",
    `<main class="login">
<h1>reins</h1>
<p>The dashboard needs the Gateway's admin token (<code>REINS_ADMIN_TOKEN</code>, or the <code>admin-token</code> file in its data directory).</p>
${notice === null ? "" : `<p class="notice" role="alert" id="login-notice">${escape(notice)}</p>`}
<form method="post" action="/ui/login">
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form>
</main>`
  )

/** The app: its modules render into #app from the admin API. */
export const shellPage = () =>
  page(
    "Dashboard",
    `<div id="app"><p class="loading">Loading…</p></div>
<noscript><p class="notice">The dashboard needs JavaScript.</p></noscript>`,
    `<link rel="stylesheet" href="/ui/vendor/uplot.css">
<script type="importmap">${importMap}</script>
<script type="module" src="/ui/assets/app.js"></script>`
  )

export const errorPage = (title: string, message: string) =>
  page(title, `<main class="login"><h1>${escape(title)}</h1><p class="notice" role="alert">${escape(message)}</p><p><a href="/ui">Back to the dashboard</a></p></main>`)
