/**
 * A version as a checkpoint-able state. A checkpoint is the device's model directory (weights,
 * tokenizer, template, optimizer state; written atomically by the device) plus the Trainer's
 * cursor next to it: the version, how many groups were trained, where the task order stands and
 * the tasks that were handed out but not trained yet. The cursor is written (atomically) only
 * after the model directory is complete, so the newest cursor always names a whole checkpoint.
 *
 * Resuming from a cursor trains every task exactly as if the run had not stopped: the pending
 * tasks are handed out again first (their old rollouts died with the run and were never
 * trained), then the task order continues; rollouts trained in versions after the checkpoint
 * were lost with those versions, so nothing is counted twice.
 */
import { VersionMetrics } from "@reins/protocol"
import { Effect, Schema } from "effect"
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import path from "node:path"
import { readJsonl } from "../jsonl.js"
import { TaskItem, TrainerError } from "./ports.js"

export class Cursor extends Schema.Class<Cursor>("Cursor")({
  version: Schema.Int,
  /** Updates the run has made so far (`max_versions` counts them across restarts). */
  versions: Schema.Int,
  /** Groups trained (or found untrainable) so far: the admission budget restarts from here. */
  consumedGroups: Schema.Int,
  /** The task source's position (see `TaskSource.position`). */
  tasks: Schema.Unknown,
  /** Tasks handed out but not trained at checkpoint time, in the order they were handed out. */
  pending: Schema.Array(TaskItem),
  /** Wall seconds of the run up to the checkpoint. */
  wallSeconds: Schema.Number
}) {}

const fail = (operation: string) => (e: unknown) => new TrainerError({ operation, message: e instanceof Error ? e.message : String(e) })

/** Where the model directory of `version` lives under a run's checkpoint folder. */
export const checkpointDir = (root: string, version: number) => path.join(root, `v${String(version).padStart(6, "0")}`)

const cursorFile = (root: string, version: number) => `${checkpointDir(root, version)}.cursor.json`

/** Writes `text` to a temporary sibling of `file`, then renames it into place. */
const writeAtomically = (file: string, text: string) => {
  const temp = `${file}.tmp`
  writeFileSync(temp, text)
  renameSync(temp, file)
}

/** Writes the cursor of a checkpoint whose model directory is already complete. */
export const writeCursor = (root: string, cursor: Cursor): Effect.Effect<void, TrainerError> =>
  Effect.try({
    try: () => {
      mkdirSync(root, { recursive: true })
      writeAtomically(cursorFile(root, cursor.version), JSON.stringify(Schema.encodeSync(Cursor)(cursor), null, 2))
    },
    catch: fail("write checkpoint cursor")
  })

/** The newest checkpoint under `root` (its cursor and model directory), if any. */
export const latestCheckpoint = (root: string): Effect.Effect<{ readonly dir: string; readonly cursor: Cursor } | null, TrainerError> =>
  Effect.gen(function*() {
    if (!existsSync(root)) return null
    const versions = readdirSync(root)
      .map((name) => /^v(\d+)\.cursor\.json$/.exec(name))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => b - a)
    for (const version of versions) {
      const dir = checkpointDir(root, version)
      if (!existsSync(dir)) continue
      const cursor = yield* Effect.try({
        try: () => Schema.decodeUnknownSync(Cursor)(JSON.parse(readFileSync(cursorFile(root, version), "utf8"))),
        catch: fail(`read checkpoint cursor ${cursorFile(root, version)}`)
      })
      return { dir, cursor }
    }
    return null
  })

/**
 * Cuts a metrics log back to the versions a checkpoint holds: the lines of versions after it
 * describe updates that were lost with the crash and will be redone.
 */
export const truncateMetrics = (file: string, version: number): Effect.Effect<void, TrainerError> =>
  Effect.gen(function*() {
    const rows = yield* readJsonl(file, VersionMetrics).pipe(Effect.mapError(fail("read metrics")))
    const kept = rows.filter((r) => r.version <= version)
    if (kept.length === rows.length) return
    const encode = Schema.encodeSync(VersionMetrics)
    yield* Effect.try({
      try: () => writeAtomically(file, kept.map((r) => `${JSON.stringify(encode(r))}\n`).join("")),
      catch: fail("truncate metrics")
    })
  })
