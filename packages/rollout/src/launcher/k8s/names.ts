/**
 * Names, labels and annotations of reins Jobs. Job names are a pure function of the attempt id,
 * so creating the same attempt twice hits 409 AlreadyExists (and is adopted) instead of running
 * twice. Labels select (they must be valid label values, so odd ids are hashed); annotations
 * carry the exact ids and what a restarted controller needs to follow a Job it did not create.
 *
 * Every Job has one owner: the launcher that created it (or took it over), recorded in the
 * `reins.dev/owner` label. A launcher adopts only its own Jobs; another launcher's Job changes
 * hands only when a controller asks for it (the owner went away), by relabelling.
 */
import { createHash } from "node:crypto"

export const LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
export const MANAGED_BY = "reins"
/** The launcher that owns the Job (its identity: a rollout node's id, e.g. the pod name). */
export const LABEL_OWNER = "reins.dev/owner"
export const LABEL_ROLLOUT = "reins.dev/rollout"
export const LABEL_ATTEMPT = "reins.dev/attempt"

export const ANNOTATION_ROLLOUT_ID = "reins.dev/rollout-id"
export const ANNOTATION_ATTEMPT_ID = "reins.dev/attempt-id"
/** The task input, exposed to the pod as a file through the downward API. */
export const ANNOTATION_TASK = "reins.dev/task"
export const ANNOTATION_MAX_LOG_BYTES = "reins.dev/max-log-bytes"
export const ANNOTATION_CONTAINER = "reins.dev/container"
/** Epoch ms after which a Job that has not ended is given up as lost. */
export const ANNOTATION_GIVE_UP_AT = "reins.dev/give-up-at"

/** Where the task file is mounted inside every container. */
export const TASK_MOUNT_DIR = "/var/run/reins"
export const TASK_FILE_IN_POD = `${TASK_MOUNT_DIR}/task.json`

const hash = (s: string, n: number) => createHash("sha256").update(s).digest("hex").slice(0, n)

/** A valid label value: the id itself when it is one, else a hash of it. */
export const labelValue = (id: string): string =>
  id.length <= 63 && /^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/.test(id) ? id : `h-${hash(id, 40)}`

/** `reins-<readable part of the id>-<hash>`: a DNS-1123 label (≤ 63 chars), unique per attempt id. */
export const jobName = (attemptId: string): string => {
  const slug = attemptId.toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/-+/g, "-").replace(/^-|-$/g, "").slice(0, 40).replace(/-$/, "")
  return `reins-${slug === "" ? "" : `${slug}-`}${hash(attemptId, 10)}`
}

/** Selects the Jobs of one owner. */
export const ownerSelector = (owner: string) => `${LABEL_MANAGED_BY}=${MANAGED_BY},${LABEL_OWNER}=${labelValue(owner)}`

/**
 * Selects every reins pod. Pods keep the labels of the Job template they were made from, so a
 * Job taken over from another owner still has pods labelled with the old owner: pods are
 * watched by this label and matched to the Jobs followed (the tracker ignores the rest).
 */
export const REINS_SELECTOR = `${LABEL_MANAGED_BY}=${MANAGED_BY}`

/** The owner label of a Job (undefined for a Job reins did not label). */
export const ownerOf = (job: { readonly metadata?: { readonly labels?: Readonly<Record<string, string>> } } | null | undefined) =>
  job?.metadata?.labels?.[LABEL_OWNER]
