/**
 * Dashboard sessions. Logging in with the admin token sets an HttpOnly, SameSite=Strict cookie
 * `<expiry>.<HMAC-SHA256(admin token, expiry)>`: the token itself never leaves the login form's
 * POST body, and a session needs no server state. A cookie goes stale when it expires or the
 * admin token changes (its signature no longer verifies).
 */
import { createHmac } from "node:crypto"
import { secretsEqual } from "./keys.js"

export const SESSION_COOKIE = "reins_session"

/** How long a login lasts. */
export const SESSION_SECONDS = 12 * 60 * 60

const sign = (token: string, expiry: number) => createHmac("sha256", token).update(`reins-dashboard:${expiry}`).digest("base64url")

export const makeSession = (token: string, now = Date.now()): string => {
  const expiry = Math.floor(now / 1000) + SESSION_SECONDS
  return `${expiry}.${sign(token, expiry)}`
}

/** `none`: no cookie was sent; `stale`: one was, but it is expired or not signed by this token. */
export type SessionCheck = "valid" | "stale" | "none"

/** The value of cookie `name` in a Cookie header, if any. */
export const cookieValue = (header: string | undefined, name: string): string | undefined => {
  if (header === undefined) return undefined
  for (const part of header.split(";")) {
    const at = part.indexOf("=")
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim()
  }
  return undefined
}

export const checkSession = (token: string, headers: Readonly<Record<string, string | undefined>>, now = Date.now()): SessionCheck => {
  const value = cookieValue(headers["cookie"], SESSION_COOKIE)
  if (value === undefined || value === "") return "none"
  const m = /^(\d{1,12})\.([A-Za-z0-9_-]{1,100})$/.exec(value)
  if (m === null) return "stale"
  const expiry = Number(m[1])
  if (expiry * 1000 <= now) return "stale"
  return secretsEqual(m[2]!, sign(token, expiry)) ? "valid" : "stale"
}

export const sessionCookie = (value: string) =>
  `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_SECONDS}`

export const clearedSessionCookie = `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`

/**
 * A cookie-authenticated request that changes something (pause, resume) must come from the
 * dashboard's own origin. SameSite=Strict already keeps other sites' requests cookie-less; this
 * also refuses a same-site page on another port.
 */
export const sameOrigin = (headers: Readonly<Record<string, string | undefined>>): boolean => {
  const origin = headers["origin"]
  if (origin === undefined) return true
  const host = headers["host"]
  return host !== undefined && (origin === `http://${host}` || origin === `https://${host}`)
}
