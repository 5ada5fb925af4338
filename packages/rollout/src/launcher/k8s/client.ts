/**
 * The Kubernetes client library, imported when a Kubernetes launcher starts rather than with
 * @reins/rollout: importing it takes ~0.9 s, which every process that imports reins (each
 * command of the CLI, a harness's tests) paid for a launcher most of them never start.
 */
import { Effect } from "effect"

export type KubeClient = typeof import("@kubernetes/client-node")

let loading: Promise<KubeClient> | undefined

export const kubeClient: Effect.Effect<KubeClient> = Effect.promise(() => (loading ??= import("@kubernetes/client-node")))
