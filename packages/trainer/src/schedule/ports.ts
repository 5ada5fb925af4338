/**
 * What a schedule needs from the rest of the system, as small interfaces: the Trainer never
 * imports the Gateway or the Rollout Controller (they meet through @reins/protocol messages; the
 * `reins` package wires these ports to the real actors and services).
 */
import { type DeviceInfo, type GatewayState, type PauseMode, type RolloutEnded, type SubmittedGroup, Task, type TrainedCall, type TrainRequest, type TrainResult } from "@reins/protocol"
import { Data, type Effect, type Option, Schema } from "effect"
import type { RolloutRecord } from "../samples/trace.js"

/** Something a schedule depends on failed (the device, the controller, the store, the Gateway). */
export class TrainerError extends Data.TaggedError("TrainerError")<{
  readonly operation: string
  readonly message: string
}> {}

/** Maps any error with a message to a `TrainerError` of `operation`. */
export const trainerError = (operation: string) => (e: unknown) =>
  new TrainerError({
    operation,
    message: typeof e === "object" && e !== null && "message" in e ? String((e as { message: unknown }).message) : String(e)
  })

/** A task and the other fields of its task-set line (a reference answer, ...: the verifier sees them). */
export const TaskItem = Schema.Struct({ task: Task, extra: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })) })
export type TaskItem = typeof TaskItem.Type

/** The next tasks to train on (a seeded, resumable order; see the rollout package's task queue). */
export interface TaskSource {
  readonly next: Effect.Effect<Option.Option<TaskItem>, TrainerError>
  /** Where the source stands, saved with checkpoints (JSON). */
  readonly position: Effect.Effect<unknown>
}

/** Asked before a rollout of a group starts; see `StalenessGate.admit`. Groups the run did not submit are not its business. */
export type GroupAdmission = (groupId: string) => Effect.Effect<boolean>

export interface ControllerPort {
  /** `groupId` is chosen by the Trainer (unique in the run), so admission can recognise the group from its first rollout on. */
  readonly submit: (item: TaskItem, size: number, groupId: string) => Effect.Effect<SubmittedGroup, TrainerError>
  /** Waits for every rollout of the group to end (pushed by the controller, never polled). */
  readonly awaitGroup: (groupId: string) => Effect.Effect<ReadonlyArray<RolloutEnded>, TrainerError>
  readonly setAdmission: (admission: GroupAdmission | null) => Effect.Effect<void>
  /** Asks the controller to re-check waiting rollouts (the budget grew). */
  readonly reconsider: Effect.Effect<void>
  readonly cancel: (rolloutId: string, reason: string) => Effect.Effect<boolean, TrainerError>
}

/** Recorded rollouts (the Gateway's store). */
export interface RecordSource {
  /** A rollout's trace: what the store recorded, calls without their request and response bodies (`Store.rolloutTrace`). */
  readonly rollout: (rolloutId: string) => Effect.Effect<RolloutRecord, TrainerError>
  /** What an update trained of each call (`Store.recordTrained`), recorded once its version exists. */
  readonly recordTrained: (calls: ReadonlyArray<TrainedCall>) => Effect.Effect<void, TrainerError>
}

export interface GatewayPort {
  readonly pause: (mode: PauseMode) => Effect.Effect<GatewayState, TrainerError>
  readonly resume: Effect.Effect<GatewayState, TrainerError>
  readonly state: Effect.Effect<GatewayState, TrainerError>
  /** The generation device's weights were swapped without a pause (split): the Gateway records the new version. */
  readonly swapped: Effect.Effect<GatewayState, TrainerError>
}

/** What the busy fractions are computed from: the version served and the device's cumulative seconds. */
export type DeviceClockReading = Pick<DeviceInfo, "version" | "generatingSeconds" | "trainingSeconds">

/** A device owner: the policy's weights, its generation engine, its optimizer. */
export interface DevicePort {
  /** The version it serves, its context, and its busy clock. */
  readonly info: Effect.Effect<DeviceInfo, TrainerError>
  /** One update (optimizer steps × samples; the device packs micro-batches); the engine then serves version + 1. */
  readonly train: (request: TrainRequest) => Effect.Effect<TrainResult, TrainerError>
  /** Copies this device's weights (and version) into `target`'s engine: the split schedule's swap. */
  readonly sendWeightsTo: (target: DevicePort) => Effect.Effect<void, TrainerError>
  readonly save: (dir: string) => Effect.Effect<void, TrainerError>
  readonly restore: (dir: string, version: number) => Effect.Effect<void, TrainerError>
}

/** Everything a run talks to. In the collocated and sync schedules `training` is `generation`. */
export interface TrainerPorts {
  readonly tasks: TaskSource
  readonly controller: ControllerPort
  readonly records: RecordSource
  readonly gateway: GatewayPort
  readonly generation: DevicePort
  readonly training: DevicePort
}

export type { RolloutEnded }
