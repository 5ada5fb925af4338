/**
 * Ids that sort by creation time: a 48-bit millisecond timestamp, a counter that orders ids made
 * in the same millisecond by this process, then 64 random bits. "Newest first" paging uses the
 * id itself as the cursor.
 */
import { randomBytes } from "node:crypto"

let lastMs = 0
let counter = 0

export const newId = (prefix: string): string => {
  const now = Date.now()
  if (now === lastMs) counter++
  else {
    lastMs = now
    counter = 0
  }
  return `${prefix}_${now.toString(16).padStart(12, "0")}${counter.toString(16).padStart(4, "0")}${randomBytes(8).toString("hex")}`
}
