/** The Effect API of reins. */

/** The actor kernel: actors, nodes, clusters, supervision (see runtime/README.md). */
export * as Runtime from "@reins/runtime"

/** The Gateway's store as the Rollout Controller's attempt ledger. */
export { storeLedger, storeLedgerLayer } from "./wiring/storeLedger.js"

/** Every role of a run in one process (device workers, Gateway, launcher, controller, Trainer ports). */
export { controllerPort, localStack, type LocalStack, type LocalStackOptions } from "./wiring/localStack.js"
