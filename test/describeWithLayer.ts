/**
 * A describe block whose tests run on one layer, built before the first and released after the
 * last: what @effect/vitest's `layer(...)` offers, without its side effect. That one assigns its
 * runtime's `effect` and `scoped` onto the `it` every file shares; with vitest's workers reusing
 * modules across files (`isolate: false`), a later file's `it.effect` then ran on this file's
 * released layer, without the TestClock.
 */
import { Effect, type Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, it } from "vitest"

export interface LayerTests<R> {
  readonly effect: (name: string, self: () => Effect.Effect<unknown, unknown, R>) => void
}

export const describeWithLayer = <R, E>(name: string, layer: Layer.Layer<R, E>, timeoutMs: number, body: (it: LayerTests<R>) => void) =>
  describe(name, () => {
    const runtime = ManagedRuntime.make(layer)
    beforeAll(() => runtime.runPromise(Effect.void), timeoutMs)
    afterAll(() => runtime.dispose(), timeoutMs)
    body({ effect: (test, self) => it(test, { timeout: timeoutMs }, () => runtime.runPromise(Effect.suspend(self))) })
  })
