/** The root command; each subcommand lives in its own file beside this one. */
import { Command } from "@effect/cli"
import { start } from "./start.js"

const reins = Command.make("reins").pipe(
  Command.withDescription("Reinforcement learning for LLM agents through the harness they are deployed with."),
  Command.withSubcommands([start])
)

export const cli = Command.run(reins, { name: "reins", version: "0.1.0" })
