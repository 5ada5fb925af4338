/**
 * What a run learns beyond the Gateway's own records — each Trainer update's metrics and each
 * evaluation's pass@1 — written into the Gateway's durable event log, so the dashboard's Runs
 * page charts them from `/api/events` like everything else (and a reconnecting page replays them).
 * Recording is best effort: a store that cannot write is logged, never fails the run.
 */
import type { StoreService } from "@reins/gateway"
import { VersionMetrics } from "@reins/protocol"
import type { TrainerEvent } from "@reins/trainer"
import { Effect, Schema, Stream } from "effect"
import type { EvalResult } from "../run/evaluate.js"

const logged = (what: string) => <A, E extends { readonly message: string }>(effect: Effect.Effect<A, E>) =>
  effect.pipe(
    Effect.asVoid,
    Effect.catchAll((e) => Effect.logWarning(`could not record ${what} for the dashboard: ${e.message}`))
  )

const encodeMetrics = Schema.encodeSync(VersionMetrics)

/** Records every `Version` event of `events` as a `trainer.version` event, until the stream ends. */
export const recordTrainerEvents = (store: StoreService, events: Stream.Stream<TrainerEvent>): Effect.Effect<void> =>
  Stream.runForEach(events, (e) => (e._tag === "Version" ? logged("an update")(store.recordEvent("trainer.version", encodeMetrics(e.metrics))) : Effect.void))

/** Records an evaluation's result as an `evaluation` event. */
export const recordEvaluation = (store: StoreService, split: string, version: number, result: EvalResult): Effect.Effect<void> =>
  logged("an evaluation")(
    store.recordEvent("evaluation", {
      split,
      version,
      tasks: result.tasks,
      rollouts: result.rollouts,
      passAt1: result.passAt1,
      greedyPassAt1: result.greedyPassAt1,
      harnessErrors: result.harnessErrors,
      seconds: result.seconds
    })
  )
