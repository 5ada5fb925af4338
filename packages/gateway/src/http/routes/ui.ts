/**
 * The dashboard at `/ui`: the login form (the admin token in a POST body, answered with an
 * HttpOnly, SameSite=Strict session cookie), the app's shell for a valid session, and its static
 * files. The app reads only the admin API; these routes serve no data. Errors are HTML pages.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { clearedSessionCookie, sessionCookie } from "../../auth/session.js"
import { type Asset, loadAssets } from "../../dashboard/assets.js"
import { CSP, errorPage, loginPage, shellPage } from "../../dashboard/html.js"
import { type ApiError, badRequest, notFound } from "../errors.js"
import type { AppEnv } from "./env.js"

const HTML_HEADERS = {
  "content-security-policy": CSP,
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer"
}

const html = (body: string, status = 200, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(body, { status, contentType: "text/html; charset=utf-8", headers: { ...HTML_HEADERS, ...headers } })

/** An API error as a page (the route table's `errors: "html"`). */
export const toHtmlResponse = (e: ApiError) => html(errorPage(e.status === 404 ? "Not found" : "Something went wrong", e.message), e.status)

/** `GET /ui`: the app for a valid session, else the login form (saying so when the cookie is stale). */
export const index = (env: AppEnv) =>
  Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
    const session = env.sessions.check(request.headers)
    if (session === "valid") return html(shellPage())
    return session === "stale"
      ? html(loginPage("Your session has expired or is no longer valid (the admin token changed). Log in again."), 401, { "set-cookie": clearedSessionCookie })
      : html(loginPage(null))
  })

/** The form is a few hundred bytes; anything much larger is not it. */
const MAX_FORM_BYTES = 8 * 1024

/** `POST /ui/login` (form field `token`). */
export const login = (env: AppEnv) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (Number(request.headers["content-length"] ?? 0) > MAX_FORM_BYTES) return html(loginPage("The login form was too large."), 413)
    if (!(request.headers["content-type"] ?? "").startsWith("application/x-www-form-urlencoded")) {
      return html(loginPage("Log in with this form."), 400)
    }
    const form = yield* Effect.mapError(request.urlParamsBody, () => badRequest("The login form could not be read."))
    const token = form.find(([k]) => k === "token")?.[1] ?? ""
    if (token.trim() === "") return html(loginPage("Enter the admin token."), 400)
    const session = env.sessions.open(token)
    if (session === null) return html(loginPage("That is not this Gateway's admin token."), 401)
    return HttpServerResponse.empty({ status: 303, headers: { location: "/ui", "set-cookie": sessionCookie(session), "cache-control": "no-store" } })
  })

/** `POST /ui/logout`. */
export const logout = () =>
  Effect.succeed(HttpServerResponse.empty({ status: 303, headers: { location: "/ui", "set-cookie": clearedSessionCookie, "cache-control": "no-store" } }))

const serveAsset = (files: ReadonlyMap<string, Asset>, name: string) => {
  const asset = files.get(name)
  if (asset === undefined) return Effect.fail(notFound(`The dashboard has no file ${JSON.stringify(name)}.`))
  return Effect.succeed(
    HttpServerResponse.uint8Array(asset.body, { contentType: asset.contentType, headers: { "cache-control": "no-cache", "x-content-type-options": "nosniff" } })
  )
}

const pathAfter = (prefix: string) => Effect.map(HttpServerRequest.HttpServerRequest, (r) => decodeURIComponent(new URL(r.url, "http://x").pathname.slice(prefix.length)))

let assets: ReturnType<typeof loadAssets> | undefined
/** Read once per process, when the first Gateway builds its routes: a missing file fails its start. */
const files = () => (assets ??= loadAssets())

/** `GET /ui/assets/*`: the app's own modules and stylesheet. */
export const asset = () => {
  const { own } = files()
  return Effect.flatMap(pathAfter("/ui/assets/"), (name) => serveAsset(own, name))
}

/** `GET /ui/vendor/*`: the libraries, from their npm packages. */
export const vendor = () => {
  const { vendor } = files()
  return Effect.flatMap(pathAfter("/ui/vendor/"), (name) => serveAsset(vendor, name))
}
