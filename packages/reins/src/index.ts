/** The Effect API of reins. */

/** The actor kernel: actors, nodes, clusters, supervision (see runtime/README.md). */
export * as Runtime from "@reins/runtime"
