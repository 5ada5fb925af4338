/** Shared by the device tests. */
import type { Device } from "@reins/policy"
import { Effect } from "effect"

/**
 * Polls Info until the engine is parked (it has looked at every change and has nothing it may run)
 * with a request in it, or has sampled past `sampledBefore`: the held state, or the proof there
 * is none. Bounded.
 */
export const engineSettled = (device: Effect.Effect.Success<typeof Device.client>, sampledBefore: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 2_000; i++) {
      const { engine } = yield* device.Info()
      if (engine.parked && (engine.waiting + engine.running + engine.held > 0 || engine.generatedTokens > sampledBefore)) return engine
      yield* Effect.sleep("5 millis")
    }
    return yield* Effect.dieMessage("the engine never settled")
  })
