/**
 * `reins ui [--url URL] [--data DIR]`: where a running Gateway's dashboard is and how to log in.
 * Checks that the Gateway answers first, so a wrong address is said now, not in the browser.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import { existsSync } from "node:fs"
import path from "node:path"
import { failWith } from "./node.js"

const url = Options.text("url").pipe(Options.withDefault("http://127.0.0.1:8000"), Options.withDescription("The Gateway's HTTP address."))
const data = Options.text("data").pipe(Options.withDefault(".reins"), Options.withDescription("The Gateway's data directory (where its admin-token file is)."))

export const ui = Command.make("ui", { url, data }, (args) =>
  Effect.gen(function* () {
    const base = args.url.replace(/\/+$/, "")
    const res = yield* Effect.tryPromise({
      try: () => fetch(`${base}/ui`, { signal: AbortSignal.timeout(10_000) }),
      catch: (e) => new Error(`cannot reach the Gateway at ${base}: ${e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e)}`)
    })
    yield* Effect.promise(() => res.body?.cancel() ?? Promise.resolve())
    if (!res.ok) return yield* Effect.fail(new Error(`${base}/ui answered HTTP ${res.status}: is --url a reins Gateway?`))
    const file = path.join(args.data, "admin-token")
    const token = process.env.REINS_ADMIN_TOKEN ? "REINS_ADMIN_TOKEN" : existsSync(file) ? `the contents of ${file}` : `the Gateway's admin token (REINS_ADMIN_TOKEN, or admin-token in its data directory)`
    yield* Console.log(`The dashboard: ${base}/ui\nLog in with ${token}.`)
  }).pipe(failWith("reins ui"))
).pipe(Command.withDescription("Print the address of a running Gateway's dashboard (after checking it answers) and how to log in."))
