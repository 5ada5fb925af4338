/**
 * The controller actor `controller`: the `RolloutController` service over the actor protocol, so
 * a Trainer (or a tool) on any node can submit groups, cancel, and subscribe to attempt-finished
 * events (a server-streamed call: events are pushed as attempts end), and bound staleness with
 * the start budget (`SetAdmission`). The admission hook is a function and stays in-process
 * (`RolloutController.setAdmission`); both apply.
 */
import { ControllerRpcs } from "@reins/protocol"
import { Actor, type ActorSystem } from "@reins/runtime"
import { Effect, type Layer, Stream } from "effect"
import { RolloutController } from "./Controller.js"

export const ControllerActor = Actor.make("controller", ControllerRpcs)

/** Hosts the actor over the `RolloutController` of this node. */
export const controllerActorLayer: Layer.Layer<never, unknown, ActorSystem | RolloutController> = ControllerActor.toLayer(
  Effect.map(RolloutController, (controller) =>
    ControllerRpcs.of({
      Submit: ({ task, size, groupId, taskExtra }) => controller.submit({ task, size, groupId, taskExtra }),
      Cancel: ({ rolloutId, reason }) => controller.cancel(rolloutId, reason),
      CancelAll: ({ reason }) => controller.cancelAll(reason),
      AwaitGroup: ({ groupId }) => controller.awaitGroup(groupId),
      Events: () => Stream.unwrapScoped(controller.subscribe),
      Status: () => controller.status,
      SetAdmission: ({ budget }) => controller.setBudget(budget)
    }))
)
