/**
 * The tails of an attempt's captured logs, as its launcher kept them under
 * `<data dir>/attempts/<attempt>/` (harness and verifier stdout/stderr, each already size-capped
 * when written; a Kubernetes pod's log lands in stdout). Served by the launcher actor's `Logs`
 * (the dashboard asks the launchers of the cluster). Only the end of each file is read.
 */
import { AttemptLogTail } from "@reins/protocol"
import { closeSync, fstatSync, openSync, readSync } from "node:fs"
import { attemptFiles } from "./files.js"

/** Bytes returned from the end of each log. */
export const LOG_TAIL_BYTES = 64 * 1024

/** The file's size and its last `bytes` as text; null when it cannot be opened. */
export const readFileTail = (file: string, bytes = LOG_TAIL_BYTES): { readonly bytes: number; readonly text: string } | null => {
  let fd: number
  try {
    fd = openSync(file, "r")
  } catch {
    return null // never written: the attempt did not run here, or not that far
  }
  try {
    const size = fstatSync(fd).size
    const length = Math.min(size, bytes)
    const buffer = Buffer.alloc(length)
    readSync(fd, buffer, 0, length, size - length)
    return { bytes: size, text: buffer.toString("utf8") }
  } finally {
    closeSync(fd)
  }
}

/** The logs found for `attemptId` under `dataDir`, in a fixed order; empty when there are none. */
export const readAttemptLogs = (dataDir: string, attemptId: string): ReadonlyArray<AttemptLogTail> => {
  const files = attemptFiles(dataDir, attemptId)
  const named = [["stdout", files.stdout], ["stderr", files.stderr], ["verifier.stdout", files.verifierStdout], ["verifier.stderr", files.verifierStderr]] as const
  const out: Array<AttemptLogTail> = []
  for (const [name, file] of named) {
    const found = readFileTail(file)
    if (found !== null) out.push(new AttemptLogTail({ name, bytes: found.bytes, truncated: found.bytes > LOG_TAIL_BYTES, text: found.text }))
  }
  return out
}
