/**
 * Tagged errors of the rollout package. The ones that cross the wire between the controller and
 * launcher actors live in @reins/protocol (Rollout.ts) and are re-exported here so users import
 * every error from one place.
 */
import { Schema } from "effect"

export {
  JobNameConflictError,
  JobRejectedError,
  KubernetesApiError,
  LaunchConfigError,
  type LaunchError,
  SpawnError,
  VerifierError
} from "@reins/protocol"

/** One line of a task set that could not be used. `line` is 1-based. */
export class TaskSetProblem extends Schema.Class<TaskSetProblem>("TaskSetProblem")({
  line: Schema.Int,
  kind: Schema.Literal("json", "schema", "duplicate"),
  message: Schema.String
}) {}

/**
 * A task set that cannot be used: unreadable file, a bad line under `onBadLine: "fail"`, or no
 * usable task at all. `problems` lists every bad line found (all of them, not just the first).
 */
export class TaskSetError extends Schema.TaggedError<TaskSetError>()("TaskSetError", {
  reason: Schema.Literal("unreadable", "bad-lines", "empty"),
  path: Schema.NullOr(Schema.String),
  message: Schema.String,
  problems: Schema.Array(TaskSetProblem)
}) {}

/** A task queue that cannot produce groups (bad group size, nothing in the requested split, ...). */
export class TaskQueueError extends Schema.TaggedError<TaskQueueError>()("TaskQueueError", {
  message: Schema.String
}) {}
