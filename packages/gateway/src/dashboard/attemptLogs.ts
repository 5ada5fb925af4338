/**
 * An attempt's captured logs for the dashboard: the files the local launcher of this node writes
 * under `<launcher data dir>/attempts/<attempt id>/` (harness and verifier stdout/stderr, each
 * already size-capped by the launcher). The Gateway reads them only when told that directory
 * (`GatewayOptions.attemptLogDir`: the local stack's launcher); attempts run by another node's
 * launcher keep their logs there. Only the tail of each file is returned.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs"
import path from "node:path"

/** Bytes returned from the end of each log. */
export const LOG_TAIL_BYTES = 64 * 1024

const FILES = ["stdout", "stderr", "verifier.stdout", "verifier.stderr"] as const

export interface LogTail {
  readonly name: (typeof FILES)[number]
  readonly bytes: number
  /** The text of the last `LOG_TAIL_BYTES` (true when the file is longer). */
  readonly truncated: boolean
  readonly text: string
}

/** Gateway attempt ids (`at_` + hex) are plain directory names; anything else is never a path here. */
const SAFE_ID = /^at_[0-9a-f]{1,64}$/

const tail = (file: string): { readonly bytes: number; readonly text: string } | null => {
  let fd: number
  try {
    fd = openSync(file, "r")
  } catch {
    return null
  }
  try {
    const size = fstatSync(fd).size
    const length = Math.min(size, LOG_TAIL_BYTES)
    const buffer = Buffer.alloc(length)
    readSync(fd, buffer, 0, length, size - length)
    return { bytes: size, text: buffer.toString("utf8") }
  } finally {
    closeSync(fd)
  }
}

/** The logs found for `attemptId` under `dir`, in a fixed order; empty when there are none. */
export const readAttemptLogs = (dir: string, attemptId: string): ReadonlyArray<LogTail> => {
  if (!SAFE_ID.test(attemptId)) return []
  const out: Array<LogTail> = []
  for (const name of FILES) {
    const found = tail(path.join(dir, "attempts", attemptId, `${name}.log`))
    if (found !== null) out.push({ name, bytes: found.bytes, truncated: found.bytes > LOG_TAIL_BYTES, text: found.text })
  }
  return out
}
