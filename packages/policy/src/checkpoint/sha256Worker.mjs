// The SHA-256 of the bytes the parent thread hands over in shared buffers (see sha256Thread.ts):
// each message names a buffer and a length to hash next; the buffer is handed back once hashed.
// Plain JavaScript: a worker runs it directly, with no TypeScript loader.
import { createHash } from "node:crypto"
import { parentPort, workerData } from "node:worker_threads"

const slots = workerData.slots.map((shared) => new Uint8Array(shared))
const hash = createHash("sha256")
parentPort.on("message", (m) => {
  if (m.digest) {
    parentPort.postMessage({ digest: hash.digest("hex") })
    parentPort.close()
    return
  }
  hash.update(slots[m.slot].subarray(0, m.length))
  parentPort.postMessage({ free: m.slot })
})
