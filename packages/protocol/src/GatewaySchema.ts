/**
 * The Gateway's actor protocol: the pause gate of the collocated-async schedule. The Trainer
 * pauses the Gateway (new model calls are held, never refused), updates the weights on the
 * device, and resumes; the harnesses only see a slower reply.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Schema } from "effect"

/** `drain`: in-flight generations finish; `interrupt`: they stop at a token boundary and continue after resume. */
export const PauseMode = Schema.Literal("drain", "interrupt")
export type PauseMode = typeof PauseMode.Type

export class GatewayState extends Schema.Class<GatewayState>("GatewayState")({
  paused: Schema.Boolean,
  mode: Schema.NullOr(PauseMode),
  /** Calls waiting at the gate. */
  held: Schema.Int,
  /** Calls past the gate whose generation has not finished. */
  inFlight: Schema.Int,
  /** Seconds since the current pause began (0 when running). */
  pausedSeconds: Schema.Number,
  /** How long the last pause took to free the device. */
  lastDrainSeconds: Schema.NullOr(Schema.Number),
  modelId: Schema.String,
  /** The policy version serving new tokens. */
  version: Schema.Int
}) {}

/** The backend could not pause or resume (the device owner is gone, an upstream failed, ...). */
export class GatewayError extends Schema.TaggedError<GatewayError>()("GatewayError", {
  message: Schema.String
}) {}

export class GatewayRpcs extends RpcGroup.make(
  /** Hold new calls and free the device; succeeds once it is free. */
  Rpc.make("Pause", { payload: { mode: PauseMode }, success: GatewayState, error: GatewayError }),
  /** Release the held calls; they are served by the (possibly new) weights. */
  Rpc.make("Resume", { success: GatewayState, error: GatewayError }),
  Rpc.make("State", { success: GatewayState })
) {}
