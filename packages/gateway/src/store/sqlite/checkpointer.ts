/**
 * The WAL checkpointer: checkpoints run in a worker thread (see checkpointer.mjs), off the
 * response path, every `CHECKPOINT_INTERVAL_MS`.
 */
import type Database from "better-sqlite3"
import { Effect } from "effect"
import { Worker } from "node:worker_threads"

const CHECKPOINT_INTERVAL_MS = 500

/**
 * Starts the WAL checkpointer thread; stops it (after a last checkpoint) with the scope. If it
 * cannot run, SQLite's own automatic checkpoints are turned back on.
 */
export const startCheckpointer = (db: Database.Database, filename: string) =>
  Effect.acquireRelease(
    Effect.async<Worker | null>((resume) => {
      const fallback = (why: unknown) => {
        db.pragma("wal_autocheckpoint = 1000")
        resume(Effect.as(Effect.logWarning(`WAL checkpointer unavailable (${String(why)}); checkpointing inline`), null))
      }
      let worker: Worker
      try {
        worker = new Worker(new URL("./checkpointer.mjs", import.meta.url), { workerData: { filename, intervalMs: CHECKPOINT_INTERVAL_MS } })
      } catch (e) {
        return fallback(e)
      }
      const onError = (e: Error) => fallback(e)
      worker.once("error", onError)
      worker.once("message", (m: { ready?: boolean; error?: string }) => {
        worker.off("error", onError)
        if (!m.ready) return fallback(m.error)
        worker.on("error", (e) => Effect.runFork(Effect.logWarning(`WAL checkpointer failed: ${e.message}`)))
        worker.unref()
        resume(Effect.succeed(worker))
      })
    }),
    (worker) =>
      worker === null
        ? Effect.void
        : Effect.async<void>((resume) => {
            const done = () => resume(Effect.promise(() => worker.terminate()).pipe(Effect.asVoid))
            const timer = setTimeout(done, 5_000)
            worker.on("message", (m: { stopped?: boolean }) => {
              if (!m.stopped) return
              clearTimeout(timer)
              done()
            })
            worker.postMessage("stop")
          })
  )
