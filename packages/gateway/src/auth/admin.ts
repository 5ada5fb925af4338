/**
 * The admin token guards `/api/...`. It comes from `REINS_ADMIN_TOKEN`, or from
 * `<data dir>/admin-token`, which is generated on first start with mode 0600. Agents never get it.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { type ApiError, adminUnauthorized, crossOrigin, sessionExpired, sessionReadOnly } from "../http/errors.js"
import { keyFromHeaders } from "./attempt.js"
import { secretsEqual } from "./keys.js"
import { checkSession, sameOrigin } from "./session.js"

export const ADMIN_TOKEN_FILE = "admin-token"

export class AdminTokenError extends Error {
  readonly _tag = "AdminTokenError"
}

/** The token to use: explicit, else the environment, else the file under `dataDir` (created if missing). */
export const resolveAdminToken = (dataDir: string, explicit?: string): Effect.Effect<string, AdminTokenError> =>
  Effect.try({
    try: () => {
      const given = explicit ?? process.env.REINS_ADMIN_TOKEN
      if (given !== undefined && given.trim() !== "") return given.trim()
      const file = path.join(dataDir, ADMIN_TOKEN_FILE)
      fs.mkdirSync(dataDir, { recursive: true })
      try {
        const fd = fs.openSync(file, "wx", 0o600)
        const token = "ra-" + randomBytes(32).toString("base64url")
        fs.writeSync(fd, token + "\n")
        fs.fsyncSync(fd)
        fs.closeSync(fd)
        return token
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
      }
      if ((fs.statSync(file).mode & 0o077) !== 0) fs.chmodSync(file, 0o600)
      const token = fs.readFileSync(file, "utf8").trim()
      if (token === "") throw new Error(`${file} is empty; delete it to generate a new token`)
      return token
    },
    catch: (e) => new AdminTokenError(`admin token: ${e instanceof Error ? e.message : String(e)}`)
  })

/**
 * What a dashboard session cookie may do on a route: `read` (GET routes), `control` (pause and
 * resume, from the dashboard's own origin), or nothing (every other write needs the token itself).
 */
export type SessionAccess = "read" | "control" | "none"

/**
 * The admin token as a header, or (the dashboard) a valid session cookie within `access`. A
 * header, when given, decides alone.
 */
export const checkAdmin = (
  token: string,
  headers: Readonly<Record<string, string | undefined>>,
  access: SessionAccess = "read"
): Effect.Effect<void, ApiError> => {
  const given = keyFromHeaders(headers) ?? headers["x-admin-token"] ?? null
  if (given !== null) return secretsEqual(given, token) ? Effect.void : Effect.fail(adminUnauthorized())
  const session = checkSession(token, headers)
  if (session === "stale") return Effect.fail(sessionExpired())
  if (session === "none") return Effect.fail(adminUnauthorized())
  if (access === "read") return Effect.void
  if (access === "control") return sameOrigin(headers) ? Effect.void : Effect.fail(crossOrigin())
  return Effect.fail(sessionReadOnly())
}
