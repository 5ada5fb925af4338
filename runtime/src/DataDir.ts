/**
 * A node's data directory: its stable id (so a restarted node rejoins as itself) and a lock so two
 * live processes never share one directory (and so one id). A lock left by a killed process is
 * taken over.
 */
import { Effect, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { NodeStartError } from "./errors.js"

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

const fail = (detail: string) => Effect.fail(new NodeStartError({ detail }))

/** Creates the directory if needed and locks it for this process until the scope closes. */
export const lock = (dir: string): Effect.Effect<void, NodeStartError, Scope.Scope> =>
  Effect.gen(function*() {
    try {
      mkdirSync(dir, { recursive: true })
    } catch (error) {
      return yield* fail(`cannot create data directory ${dir}: ${(error as Error).message}`)
    }
    const file = path.join(dir, "node.lock")
    if (existsSync(file)) {
      const pid = Number(readFileSync(file, "utf8").trim())
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) {
        return yield* fail(
          `data directory ${dir} is in use by another reins node (pid ${pid}); give each node its own --data DIR`
        )
      }
    }
    writeFileSync(file, `${process.pid}\n`)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        try {
          if (readFileSync(file, "utf8").trim() === String(process.pid)) unlinkSync(file)
        } catch {
          // already gone
        }
      })
    )
  })

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/** The node id stored in the directory, created on first start (`<host>-<6 hex>`). */
export const nodeId = (dir: string, override: string | undefined): Effect.Effect<string, NodeStartError> =>
  Effect.suspend(() => {
    if (override !== undefined) {
      return ID_PATTERN.test(override) ? Effect.succeed(override) : fail(`invalid node id "${override}" (letters, digits, . _ -)`)
    }
    const file = path.join(dir, "node-id")
    if (existsSync(file)) {
      const stored = readFileSync(file, "utf8").trim()
      if (ID_PATTERN.test(stored)) return Effect.succeed(stored)
      return fail(`${file} holds an invalid node id; delete it to get a new one`)
    }
    const host = os.hostname().toLowerCase().replace(/[^a-z0-9-]/g, "").slice(0, 20) || "node"
    const id = `${host}-${randomBytes(3).toString("hex")}`
    writeFileSync(file, `${id}\n`)
    return Effect.succeed(id)
  })
