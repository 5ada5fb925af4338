// The checksum (CRC-32 or SHA-256, see checksum.ts) of the bytes the parent thread hands over in
// shared buffers (see checksumThread.ts): each message names a buffer and a length to hash next;
// the buffer is handed back once hashed. A CRC-32 can start from the value of the bytes before
// (`seed`: the parent hashed those itself while this thread started). The first message out says
// the thread is ready. Plain JavaScript: a worker runs it directly, with no
// TypeScript loader, so the two algorithms are written out here as checksum.ts writes them.
import { createHash } from "node:crypto"
import { crc32 } from "node:zlib"
import { parentPort, workerData } from "node:worker_threads"

const slots = workerData.slots.map((shared) => new Uint8Array(shared))
const sha = workerData.algorithm === "sha256" ? createHash("sha256") : undefined
let crc = 0
parentPort.on("message", (m) => {
  if (m.seed !== undefined) {
    crc = m.seed
    return
  }
  if (m.digest) {
    parentPort.postMessage({ digest: sha !== undefined ? sha.digest("hex") : crc.toString(16).padStart(8, "0") })
    parentPort.close()
    return
  }
  const bytes = slots[m.slot].subarray(0, m.length)
  if (sha !== undefined) sha.update(bytes)
  else crc = crc32(bytes, crc)
  parentPort.postMessage({ free: m.slot })
})
parentPort.postMessage({ ready: true })
