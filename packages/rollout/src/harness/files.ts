/**
 * The per-attempt directory under the data directory:
 *
 *   <dataDir>/attempts/<attemptId>/
 *     task.json          the task input (what the harness gets as REINS_TASK_FILE)
 *     task-record.json   the whole task line, extras included (what the verifier gets)
 *     stdout.log         harness stdout (the pod log for Kubernetes), size-capped
 *     stderr.log         harness stderr (empty for Kubernetes: the pod log merges both)
 *     verifier.stdout.log / verifier.stderr.log
 *     pid, verifier.pid  while a process group may be alive: its pgid and the attempt's ids
 *                        (a restarted node reaps what a killed one left, see process/reaper.ts)
 *
 * Attempt ids are used as directory names only when they are plainly safe; anything else is
 * hashed, so an id can never escape the data directory.
 */
import { SpawnError, type Task } from "@reins/protocol"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { localSpawnError } from "../process/processGroup.js"
import { taskInputJson } from "./env.js"

export const attemptDirName = (attemptId: string): string =>
  /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(attemptId) && !attemptId.includes("..")
    ? attemptId
    : `h-${createHash("sha256").update(attemptId).digest("hex").slice(0, 32)}`

export const attemptFiles = (dataDir: string, attemptId: string) => {
  const dir = join(dataDir, "attempts", attemptDirName(attemptId))
  return {
    dir,
    taskFile: join(dir, "task.json"),
    taskRecordFile: join(dir, "task-record.json"),
    stdout: join(dir, "stdout.log"),
    stderr: join(dir, "stderr.log"),
    verifierStdout: join(dir, "verifier.stdout.log"),
    verifierStderr: join(dir, "verifier.stderr.log"),
    pidFile: join(dir, "pid"),
    verifierPidFile: join(dir, "verifier.pid")
  }
}

/** The paths of one attempt's files (see the layout above). */
export type AttemptFiles = Readonly<ReturnType<typeof attemptFiles>>

/** The task line as the verifier sees it: id, input, split and every extra field. */
export const taskRecordJson = (task: Task, extra: Readonly<Record<string, unknown>> = {}): string =>
  JSON.stringify({ ...extra, id: task.id, input: task.input ?? null, ...(task.split === undefined ? {} : { split: task.split }) })

/** Creates the directory and writes both task files. A failure here is the node's (disk full, permissions): infrastructure. */
export const prepareAttemptFiles = (
  dataDir: string,
  attemptId: string,
  task: Task,
  extra: Readonly<Record<string, unknown>> = {}
): Effect.Effect<AttemptFiles, SpawnError> => {
  const files = attemptFiles(dataDir, attemptId)
  // Synchronous on purpose: three tiny local writes cost less than three thread-pool round trips.
  return Effect.try({
    try: () => {
      mkdirSync(files.dir, { recursive: true })
      writeFileSync(files.taskFile, taskInputJson(task))
      writeFileSync(files.taskRecordFile, taskRecordJson(task, extra))
      return files
    },
    catch: (e) => localSpawnError(e, "(prepare attempt directory)", `cannot prepare ${files.dir}`)
  })
}
