/** The Effect API of reins. */

/** The actor kernel: actors, nodes, clusters, supervision (see runtime/README.md). */
export * as Runtime from "@reins/runtime"

/** The Gateway's store as the Rollout Controller's attempt ledger. */
export { storeLedger, storeLedgerLayer } from "./wiring/storeLedger.js"
