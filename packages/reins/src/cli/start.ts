/**
 * `reins start`: what `npm start` runs. Until the training run exists, a local node with all three
 * roles (placeholder actors), and how to reach it.
 */
import { Command } from "@effect/cli"
import { Console, Effect, Option } from "effect"
import { failWith, runNode } from "./node.js"

export const start = Command.make("start", {}, () =>
  Console.log("reins start: a local node with the gateway, trainer and rollout roles (placeholder actors until the training run exists)").pipe(
    Effect.zipRight(
      runNode({
        roles: ["gateway", "trainer", "rollout"],
        listen: "127.0.0.1:7400",
        join: [],
        data: ".reins/local",
        secretFile: Option.none(),
        downAfter: 4,
        maxFrameBytes: 64 * 1024 * 1024,
        id: Option.none(),
        advertise: Option.none()
      })
    ),
    failWith("reins start")
  )).pipe(Command.withDescription("Run the main job on the embedded defaults (what `npm start` runs): for now a local three-role node."))
