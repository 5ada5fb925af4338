/**
 * From what the API server says about a Job and its pods to an attempt verdict. Pure functions,
 * so every mapping rule is testable on its own:
 *
 * - pod evicted / disrupted / node lost (whatever the Job says)  → infrastructure (evicted, node-lost)
 * - a container OOMKilled                                         → infrastructure (oom-killed)
 * - a container stuck on ErrImagePull / ImagePullBackOff / ...    → infrastructure (image-pull)
 * - CreateContainerConfigError (missing Secret/ConfigMap)        → rejected spec, not retryable
 * - Job condition Complete                                        → succeeded
 * - Job condition Failed, reason DeadlineExceeded                 → failed (timeout)
 * - Job condition Failed, otherwise                               → failed (exit, with the exit code)
 * - Job deleted before it ended                                   → infrastructure (lost)
 * - anything else                                                 → still running
 */
import type { V1ContainerStatus, V1Job, V1Pod } from "@kubernetes/client-node"
import type { FailureReason, InfraReason } from "@reins/protocol"

export type JobVerdict =
  | { readonly _tag: "Running" }
  | { readonly _tag: "Succeeded"; readonly exitCode: number }
  | { readonly _tag: "Failed"; readonly reason: FailureReason; readonly exitCode: number | null; readonly message: string }
  | { readonly _tag: "Infra"; readonly reason: InfraReason; readonly retryable: boolean; readonly message: string }

export interface JobObservation {
  /** Last state of the Job seen (null: not seen yet). */
  readonly job: V1Job | null
  /** The Job was deleted (watch DELETED, or confirmed missing). */
  readonly jobGone: boolean
  readonly pods: ReadonlyArray<V1Pod>
}

const IMAGE_PULL = new Set(["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"])
const EVICTED = new Set(["Evicted", "Preempting", "Terminated", "Shutdown", "UnexpectedAdmissionError", "OutOfcpu", "OutOfmemory", "OutOfpods"])

const statuses = (pod: V1Pod): ReadonlyArray<V1ContainerStatus> => [
  ...(pod.status?.initContainerStatuses ?? []),
  ...(pod.status?.containerStatuses ?? [])
]

const podName = (pod: V1Pod) => pod.metadata?.name ?? "(pod)"

/** Infrastructure trouble visible on a pod, whatever state the Job is in. */
export const podInfraVerdict = (pod: V1Pod): JobVerdict | null => {
  const status = pod.status
  if (status?.reason === "NodeLost") return { _tag: "Infra", reason: "node-lost", retryable: true, message: `pod ${podName(pod)}: node lost: ${status.message ?? ""}`.trim() }
  if (status?.reason !== undefined && EVICTED.has(status.reason) && status.phase === "Failed") {
    return { _tag: "Infra", reason: "evicted", retryable: true, message: `pod ${podName(pod)} ${status.reason}: ${status.message ?? ""}`.trim() }
  }
  const disruption = status?.conditions?.find((c) => c.type === "DisruptionTarget" && c.status === "True")
  if (disruption !== undefined) {
    return { _tag: "Infra", reason: "evicted", retryable: true, message: `pod ${podName(pod)} disrupted (${disruption.reason ?? "unknown"}): ${disruption.message ?? ""}`.trim() }
  }
  for (const cs of statuses(pod)) {
    const terminated = cs.state?.terminated ?? cs.lastState?.terminated
    if (terminated?.reason === "OOMKilled") {
      return { _tag: "Infra", reason: "oom-killed", retryable: true, message: `pod ${podName(pod)}: container ${cs.name} was OOM-killed` }
    }
    const waiting = cs.state?.waiting
    if (waiting?.reason !== undefined && IMAGE_PULL.has(waiting.reason)) {
      return { _tag: "Infra", reason: "image-pull", retryable: true, message: `pod ${podName(pod)}: container ${cs.name} ${waiting.reason}: ${waiting.message ?? cs.image}` }
    }
    if (waiting?.reason === "CreateContainerConfigError") {
      return { _tag: "Infra", reason: "invalid-spec", retryable: false, message: `pod ${podName(pod)}: container ${cs.name}: ${waiting.message ?? waiting.reason}` }
    }
  }
  return null
}

/** The harness container's exit code, from the most recent pod that has one. */
export const harnessExitCode = (pods: ReadonlyArray<V1Pod>, container: string | undefined): number | null => {
  for (const pod of [...pods].reverse()) {
    const cs = (pod.status?.containerStatuses ?? []).find((s) => container === undefined || s.name === container) ??
      pod.status?.containerStatuses?.[0]
    const code = cs?.state?.terminated?.exitCode
    if (code !== undefined) return code
  }
  return null
}

const condition = (job: V1Job, type: string) => job.status?.conditions?.find((c) => c.type === type && c.status === "True")

export const classifyJob = (obs: JobObservation, container?: string): JobVerdict => {
  for (const pod of obs.pods) {
    const infra = podInfraVerdict(pod)
    if (infra !== null) return infra
  }
  const job = obs.job
  if (job !== null) {
    if (condition(job, "Complete") !== undefined) return { _tag: "Succeeded", exitCode: harnessExitCode(obs.pods, container) ?? 0 }
    const failed = condition(job, "Failed")
    if (failed !== undefined) {
      const exitCode = harnessExitCode(obs.pods, container)
      if (failed.reason === "DeadlineExceeded") {
        return { _tag: "Failed", reason: "timeout", exitCode, message: `Job deadline exceeded: ${failed.message ?? ""}`.trim() }
      }
      return {
        _tag: "Failed",
        reason: "exit",
        exitCode,
        message: `${exitCode === null ? "harness failed" : `exit code ${exitCode}`} (${failed.reason ?? "Failed"}${failed.message ? `: ${failed.message}` : ""})`
      }
    }
  }
  if (obs.jobGone) return { _tag: "Infra", reason: "lost", retryable: true, message: "the Job was deleted before it finished" }
  return { _tag: "Running" }
}

/** Most recent pods last (log capture takes the last one). */
export const sortPods = (pods: Iterable<V1Pod>): Array<V1Pod> =>
  [...pods].sort((a, b) => time(a.metadata?.creationTimestamp) - time(b.metadata?.creationTimestamp))

const time = (t: Date | string | undefined) => (t === undefined ? 0 : new Date(t).getTime())
