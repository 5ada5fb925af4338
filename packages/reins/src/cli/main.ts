/** The root command; each subcommand lives in its own file beside this one. */
import * as Command from "@effect/cli/Command"
import { bench } from "./bench.js"
import { evalCommand } from "./eval.js"
import { exportCommand } from "./export.js"
import { node } from "./node.js"
import { rollouts } from "./rollouts.js"
import { serve } from "./serve.js"
import { sft } from "./sft.js"
import { start } from "./start.js"
import { status } from "./status.js"
import { tokenizer } from "./tokenizer.js"
import { trainCommand } from "./train.js"
import { ui } from "./ui.js"

const reins = Command.make("reins").pipe(
  Command.withDescription("Reinforcement learning for LLM agents through the harness they are deployed with."),
  Command.withSubcommands([start, node, status, rollouts, ui, tokenizer, serve, sft, trainCommand, evalCommand, exportCommand, bench])
)

export const cli = Command.run(reins, { name: "reins", version: "0.1.0" })
