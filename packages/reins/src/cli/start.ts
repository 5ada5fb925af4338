/**
 * `reins start`: what `npm start` runs — the calc example trained on this machine with the
 * embedded defaults (`examples/calc/reins.config.json`: the shipped base policy, SQLite under
 * `.reins/`, every role in one process, collocated schedule), base vs final pass@1 at the end.
 */
import * as Command from "@effect/cli/Command"
import * as Option from "effect/Option"
import { fileURLToPath } from "node:url"
import { failWith } from "./node.js"
import { runTrain } from "./train.js"

export const CALC_CONFIG = fileURLToPath(new URL("../../../../examples/calc/reins.config.json", import.meta.url))

export const start = Command.make("start", {}, () =>
  runTrain({
    config: CALC_CONFIG,
    resume: Option.none(),
    maxVersions: Option.none(),
    noEval: false,
    join: [],
    listen: "127.0.0.1:0",
    advertise: Option.none(),
    nodeData: ".reins/train-node",
    secretFile: Option.none(),
    noLocalRollouts: false,
    gatewayHttp: "127.0.0.1:0",
    publicUrl: Option.none()
  }).pipe(failWith("reins start"))).pipe(
    Command.withDescription("Run the main job on the embedded defaults (what `npm start` runs): train the calc example agent and report base vs final pass@1.")
  )
