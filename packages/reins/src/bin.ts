/** The `reins` command line: `reins --help` lists the commands. */
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import { cli } from "./cli/main.js"

cli(process.argv).pipe(
  // @effect/cli has already printed what was wrong with the command line: exit 1, no second report.
  Effect.catchIf(ValidationError.isValidationError, () => Effect.sync(() => void (process.exitCode = 1))),
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain
)
