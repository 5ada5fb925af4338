/**
 * Ids that sort by creation time: a 48-bit millisecond timestamp, a counter that orders ids made
 * in the same millisecond by this process, then 64 random bits. "Newest first" paging uses the
 * id itself as the cursor.
 */
import { randomFillSync } from "node:crypto"

let lastMs = 0
let counter = 0

// Random bits are drawn 4 KiB at a time: one `randomBytes(8)` per id cost more than the rest of
// recording a call (ids are made on the response path).
const pool = Buffer.alloc(4096)
let used = pool.length

const random64 = (): string => {
  if (used === pool.length) {
    randomFillSync(pool)
    used = 0
  }
  used += 8
  return pool.toString("hex", used - 8, used)
}

export const newId = (prefix: string): string => {
  const now = Date.now()
  if (now === lastMs) counter++
  else {
    lastMs = now
    counter = 0
  }
  return `${prefix}_${now.toString(16).padStart(12, "0")}${counter.toString(16).padStart(4, "0")}${random64()}`
}
