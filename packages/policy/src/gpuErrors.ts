/**
 * Errors WebGPU reports without throwing. A failed allocation (out of memory) or a call the
 * device rejects (a validation error, an invalid pipeline) in tfjs's own dispatches arrives as an
 * `uncapturederror` event on the device, and the computation goes on with what that call should
 * have made: a buffer of zeros or of stale memory. A training step on it would apply a wrong
 * update without a word. The backend records them here from the moment it starts (backend.ts), and
 * the device fails the operation they happened in (device/handlers.ts): Dawn raises the event
 * during the failing call itself.
 */
import * as tf from "@tensorflow/tfjs"

/** Messages kept (the first ones: later ones usually follow from them); the rest are counted. */
const KEPT = 3

let messages: Array<string> = []
let dropped = 0
let watched: EventTarget | undefined

/** Starts recording the uncaptured errors of the running WebGPU backend's device (once per device). */
export const watchGpuErrors = (): void => {
  const device = (tf.backend() as { device?: EventTarget }).device
  if (device === undefined || device === watched) return
  watched = device
  device.addEventListener("uncapturederror", (event) => {
    const error = (event as Event & { error?: { message?: string } }).error
    if (messages.length < KEPT) messages.push(firstLine(error?.message ?? String(event)))
    else dropped++
  })
}

const firstLine = (s: string): string => s.split("\n")[0]!.trim()

/** The errors reported since the last call, in words (undefined: none), and forgets them. */
export const takeGpuErrors = (): string | undefined => {
  if (messages.length === 0) return undefined
  const said = `${messages.join("; ")}${dropped > 0 ? ` (and ${dropped} more)` : ""}`
  messages = []
  dropped = 0
  return said
}
