/** `reins start`: what `npm start` runs (the main job on embedded defaults). */
import { Command } from "@effect/cli"
import { Console } from "effect"

export const start = Command.make("start", {}, () => Console.log("reins: nothing to start yet")).pipe(
  Command.withDescription("Run the main job on the embedded defaults (what `npm start` runs).")
)
