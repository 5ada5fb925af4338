/**
 * After a kill -9 of a launcher node, the process groups it started are still running: detached
 * on purpose, so that a signal to the node does not hit them half-way. When the node comes back
 * it reads the pid files the dead incarnation left and kills those groups.
 *
 * A pgid can be reused by an unrelated process after its group died, so a member is only killed
 * when its environment carries the attempt's `REINS_ATTEMPT_ID` (read from /proc, Linux only;
 * elsewhere leftovers are reported but not killed).
 */
import { Effect } from "effect"
import { readdirSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { environHas, groupMembers, procfsAvailable } from "./procfs.js"

export interface Leftover {
  readonly attemptId: string
  readonly rolloutId: string | null
  /** Processes of the group that were still alive and got killed. */
  readonly killed: number
}

interface PidRecord {
  readonly pgid: number
  readonly attemptId?: string
  readonly rolloutId?: string
}

const readRecord = (path: string): PidRecord | null => {
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as PidRecord
    return Number.isInteger(r.pgid) ? r : null
  } catch {
    return null
  }
}

const ours = (pgid: number, attemptId: string) =>
  groupMembers(pgid).filter((m) => environHas(m.pid, "REINS_ATTEMPT_ID", attemptId))

const killAll = (pids: ReadonlyArray<number>, signal: NodeJS.Signals) => {
  for (const pid of pids) {
    try {
      process.kill(pid, signal)
    } catch {
      // already gone
    }
  }
}

/** Kills the members of `pgid` that belong to the attempt; how many there were. */
const killGroup = (pgid: number, attemptId: string, graceMs: number) =>
  Effect.gen(function*() {
    if (!procfsAvailable) {
      yield* Effect.logWarning(`cannot verify leftover process group ${pgid} of attempt ${attemptId} without /proc; not killed`)
      return 0
    }
    const members = ours(pgid, attemptId).map((m) => m.pid)
    if (members.length === 0) return 0
    killAll(members, "SIGTERM")
    const deadline = Date.now() + graceMs
    while (ours(pgid, attemptId).length > 0 && Date.now() < deadline) yield* Effect.sleep("20 millis")
    killAll(ours(pgid, attemptId).map((m) => m.pid), "SIGKILL")
    return members.length
  })

/** Finds `<dataDir>/attempts/<id>/{pid,verifier.pid}` files and kills the groups they name (SIGTERM, then SIGKILL after `graceMs`). */
export const reapLeftovers = (dataDir: string, graceMs = 2_000): Effect.Effect<ReadonlyArray<Leftover>> =>
  Effect.gen(function*() {
    const root = join(dataDir, "attempts")
    let dirs: Array<string> = []
    try {
      dirs = readdirSync(root)
    } catch {
      return []
    }
    const out: Array<Leftover> = []
    for (const d of dirs) {
      const found: Array<Leftover> = []
      // The harness's group and, if it was being verified, the verifier's.
      for (const file of ["pid", "verifier.pid"]) {
        const pidFile = join(root, d, file)
        const record = readRecord(pidFile)
        if (record === null) continue
        const attemptId = record.attemptId ?? d
        const killed = yield* killGroup(record.pgid, attemptId, graceMs)
        rmSync(pidFile, { force: true })
        found.push({ attemptId, rolloutId: record.rolloutId ?? null, killed })
      }
      if (found.length > 0) out.push({ ...found[0]!, killed: found.reduce((n, f) => n + f.killed, 0) })
    }
    return out
  })
