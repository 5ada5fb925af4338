// Checkpoints the store's WAL from a worker thread, so the fsync and the copy into the database
// file never block the Gateway's event loop (the main connection runs with wal_autocheckpoint=0).
// Plain JavaScript: a worker runs it directly, with no TypeScript loader.
import { parentPort, workerData } from "node:worker_threads"
import Database from "better-sqlite3"

const db = new Database(workerData.filename)
db.pragma("busy_timeout = 1000")
const checkpoint = () => {
  try {
    db.pragma("wal_checkpoint(PASSIVE)")
  } catch (e) {
    parentPort.postMessage({ error: e instanceof Error ? e.message : String(e) })
  }
}
const timer = setInterval(checkpoint, workerData.intervalMs)
parentPort.on("message", (message) => {
  if (message !== "stop") return
  clearInterval(timer)
  checkpoint()
  db.close()
  parentPort.postMessage({ stopped: true })
})
parentPort.postMessage({ ready: true })
