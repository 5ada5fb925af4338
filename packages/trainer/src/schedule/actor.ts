/**
 * The `trainer` actor: where a run stands and its metrics as they come, for anyone in the
 * cluster (`reins status`, a script on another node). The run itself is driven by whoever owns
 * the device (`reins train`, the `Reins` service); this actor only reports on it.
 */
import { TrainerRpcs, TrainerStatus, type VersionMetrics } from "@reins/protocol"
import { Actor } from "@reins/runtime"
import { Option, type PubSub, Ref, Stream } from "effect"
import type { TrainerEvent } from "./run.js"

export const TrainerActor = Actor.make("trainer", TrainerRpcs)

/** A status before any run started. */
export const idleStatus = (version: number) =>
  new TrainerStatus({ training: false, schedule: null, version, versions: 0, running: 0, finished: 0, consumed: 0, budget: 0 })

/** Registers the `trainer` actor over a run's status and event hub. */
export const trainerActorLayer = (status: Ref.Ref<TrainerStatus>, events: PubSub.PubSub<TrainerEvent>) =>
  TrainerActor.toLayer(
    TrainerActor.of({
      Status: () => Ref.get(status),
      Versions: () =>
        Stream.fromPubSub(events).pipe(
          Stream.filterMap((e): Option.Option<VersionMetrics> => (e._tag === "Version" ? Option.some(e.metrics) : Option.none()))
        )
    })
  )
