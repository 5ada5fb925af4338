/** The usage example of runtime/README.md, run as written (so the docs cannot rot). */
import { describe, expect, it } from "@effect/vitest"
import { Actor, ActorSystem, Packed, Rpc, RpcGroup, Supervisor } from "@reins/runtime"
import { Chunk, Effect, Ref, Schema, Stream } from "effect"

class Busy extends Schema.TaggedError<Busy>()("Busy", {}) {}
const Scorer = Actor.make(
  "scorer",
  RpcGroup.make(
    Rpc.make("Score", { payload: { ids: Packed.Int32 }, success: Schema.Number, error: Busy }),
    Rpc.make("Progress", { payload: { steps: Schema.Int }, success: Schema.Number, stream: true })
  )
)

const ScorerLive = Scorer.toLayer(
  Effect.gen(function*() {
    const calls = yield* Ref.make(0)
    return Scorer.of({
      Score: ({ ids }) => Effect.as(Ref.update(calls, (n) => n + 1), ids.reduce((a, b) => a + b, 0)),
      Progress: ({ steps }) => Stream.range(1, steps)
    })
  }),
  { restart: Supervisor.policy({ initialDelay: "200 millis", maxDelay: "5 seconds", maxRestarts: 5, within: "1 minute" }) }
)

describe("README example", () => {
  it("scores and streams progress in one process", async () => {
    const program = Effect.gen(function*() {
      const scorer = yield* Scorer.client
      const score = yield* scorer.Score({ ids: Int32Array.of(1, 2, 3) })
      const steps = yield* Stream.runCollect(scorer.Progress({ steps: 3 }))
      return { score, steps: Chunk.toReadonlyArray(steps) }
    })
    const result = await Effect.runPromise(program.pipe(Effect.provide(ScorerLive), Effect.provide(ActorSystem.layerLocal())))
    expect(result).toEqual({ score: 6, steps: [1, 2, 3] })
  })
})
