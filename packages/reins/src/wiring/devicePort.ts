/**
 * The device actor (`@reins/policy/device`, wherever it runs) as the Trainer's `DevicePort`:
 * the protocol's messages go as they are, errors become `TrainerError`s.
 */
import { type DeviceActor, deviceClient, type DeviceClient } from "@reins/policy/device"
import { RestoreRequest, SaveRequest } from "@reins/protocol"
import type { ActorSystem } from "@reins/runtime"
import { type DevicePort, trainerError } from "@reins/trainer"
import { Effect } from "effect"

/** The Trainer's view of a device actor. */
export const devicePort = (actor?: DeviceActor): Effect.Effect<DevicePort, never, ActorSystem> =>
  Effect.map(deviceClient(actor), (device) => {
    const port: DevicePort = {
      info: Effect.mapError(device.info, trainerError("device info")),
      train: (request) => Effect.mapError(device.train(request), trainerError("train")),
      sendWeightsTo: (target) =>
        device.getWeights.pipe(
          Effect.flatMap((weights) => (target as InternalPort).setWeights(weights)),
          Effect.mapError(trainerError("send weights"))
        ),
      save: (dir) => Effect.asVoid(device.save(new SaveRequest({ dir, optimizer: true }))).pipe(Effect.mapError(trainerError("save checkpoint"))),
      restore: (dir, version) =>
        Effect.asVoid(device.restore(new RestoreRequest({ dir, version }))).pipe(Effect.mapError(trainerError("restore checkpoint")))
    }
    return { ...port, setWeights: device.setWeights } satisfies InternalPort
  })

/** The weight swap needs the target's raw client; ports made here carry it. */
interface InternalPort extends DevicePort {
  readonly setWeights: DeviceClient["setWeights"]
}
