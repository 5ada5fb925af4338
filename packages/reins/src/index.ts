/** The Effect API of reins. */

/** The actor kernel: actors, nodes, clusters, supervision (see runtime/README.md). */
export * as Runtime from "@reins/runtime"

/** The Gateway's store as the Rollout Controller's attempt ledger. */
export { storeLedger, storeLedgerLayer } from "./wiring/storeLedger.js"
export { recordEvaluation, recordTrainerEvents } from "./wiring/runEvents.js"

/** Every role of a run in one process (device workers, Gateway, launcher, controller, Trainer ports). */
export { controllerPort, localStack, type LocalStack, type LocalStackOptions } from "./wiring/localStack.js"

/** Scripting runs: the `Reins` service (`Reins.local`, `Reins.connect`) to train, evaluate and inspect. */
export * as Reins from "./api/Reins.js"
/** `reins train`'s config (model, tasks, harness, trainer, evaluation) and a whole run with its report. */
export { EvalConfig, loadRunConfig, RunConfig, RunConfigError } from "./run/RunConfig.js"
export { train, type RunSummaryFile, type TrainOptions } from "./run/train.js"
export type { EvalResult } from "./run/evaluate.js"
/** The Trainer's configuration, events and errors. */
export { decodeTrainerConfig, trainerConfig, TrainerError, type TrainerEvent } from "@reins/trainer"
