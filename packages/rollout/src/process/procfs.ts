/**
 * Process-group liveness. `kill(-pgid, 0)` alone is not enough: it also succeeds while only
 * zombies are left, and an orphaned grandchild stays a zombie forever under an init that does
 * not reap (common in containers). On Linux we therefore look at /proc and count only members
 * that are not zombies. Elsewhere we fall back to `kill(-pgid, 0)`.
 */
import { readdirSync, readFileSync } from "node:fs"

const isLinux = process.platform === "linux"

interface ProcStat {
  readonly pid: number
  readonly state: string
  readonly pgrp: number
  /** Clock ticks since boot: with the pid, identifies a process across pid reuse. */
  readonly startTime: string
}

/** Parses /proc/<pid>/stat. The command name may contain spaces and parentheses: fields follow the last ')'. */
export const readProcStat = (pid: number): ProcStat | null => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ")
    return { pid, state: f[0]!, pgrp: Number(f[2]), startTime: f[19]! }
  } catch {
    return null
  }
}

/** Live (non-zombie) members of a process group, by scanning /proc (Linux only). */
export const groupMembers = (pgid: number): ReadonlyArray<ProcStat> =>
  readdirSync("/proc")
    .map(Number)
    .filter(Number.isInteger)
    .map(readProcStat)
    .filter((st): st is ProcStat => st !== null && st.pgrp === pgid && st.state !== "Z" && st.state !== "X")

/** Sends `signal` to the whole group; false when no such group exists any more. */
export const signalGroup = (pgid: number, signal: NodeJS.Signals | 0): boolean => {
  try {
    process.kill(-pgid, signal)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** True while a member of the group is alive (zombies do not count on Linux). */
export const groupAlive = (pgid: number): boolean => {
  if (!signalGroup(pgid, 0)) return false
  return isLinux ? groupMembers(pgid).length > 0 : true
}

/** Whether /proc/<pid>/environ carries `name=value` (used to recognise our own harnesses after a restart). */
export const environHas = (pid: number, name: string, value: string): boolean => {
  try {
    return readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`${name}=${value}`)
  } catch {
    return false
  }
}

export const procfsAvailable = isLinux
