/**
 * The Rollout Controller's entities: tasks, harness specs (how to run the deployed agent, as a
 * local process or a Kubernetes Job), attempt outcomes and verifier results, and the errors a
 * launcher reports. They cross the wire between the controller and launcher actors on other
 * nodes, so all of them are Schemas.
 *
 * Field names of user-written specs (`timeout_s`, `max_log_bytes`, ...) are snake_case because
 * they are read from config files next to task sets; entities the code builds are camelCase.
 */
import { Schema } from "effect"

// ---------------------------------------------------------------------------------------------
// Tasks

/** Tasks without a split belong to `train` (see `TaskQueue`). */
export const TaskSplit = Schema.Literal("train", "test")
export type TaskSplit = typeof TaskSplit.Type

/** One line of a task-set JSONL file: `{"id": string, "input": any, "split"?: "train"|"test"}`. */
export class Task extends Schema.Class<Task>("Task")({
  id: Schema.String.pipe(Schema.minLength(1, { message: () => "task id must be a non-empty string" })),
  /** Handed to the harness as JSON (`REINS_TASK`, `REINS_TASK_FILE`); any JSON value. */
  input: Schema.Unknown,
  split: Schema.optional(TaskSplit)
}) {}

// ---------------------------------------------------------------------------------------------
// Harness specs

const EnvName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: () => "environment variable names are letters, digits and _, not starting with a digit" })
)
/** Extra environment variables. The `OPENAI_*`/`REINS_*` variables of an attempt always win over these. */
export const EnvVars = Schema.Record({ key: EnvName, value: Schema.String })

const Seconds = Schema.Number.pipe(Schema.positive(), Schema.finite())
/**
 * Local launcher: the niceness (0–19) its processes run at, also set on their session's
 * autogroup. Linux puts every session in its own autogroup, which weighs as much as the whole
 * reins process (the device thread included) whatever the processes' own niceness; at 0, a dozen
 * harnesses starting up starve the device. Ignored by the Kubernetes launcher.
 */
const Niceness = Schema.Int.pipe(Schema.between(0, 19)).annotations({ description: "niceness 0..19" })
const Argv = Schema.NonEmptyArray(Schema.String).annotations({ description: "argv: program then arguments (no shell)" })

/** A command run after the harness exits; its last stdout line is the reward. */
export class VerifierSpec extends Schema.Class<VerifierSpec>("VerifierSpec")({
  command: Argv,
  cwd: Schema.optional(Schema.String),
  env: Schema.optionalWith(EnvVars, { default: () => ({}) }),
  timeout_s: Schema.optionalWith(Seconds, { default: () => 60 }),
  max_log_bytes: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 1 << 20 }),
  /** Local launcher: niceness of the verifier's processes (see `Niceness`). */
  nice: Schema.optionalWith(Niceness, { default: () => 19 })
}) {}

/** How to run the harness as a Kubernetes Job (one Job per attempt). */
export class KubernetesHarnessSpec extends Schema.Class<KubernetesHarnessSpec>("KubernetesHarnessSpec")({
  image: Schema.String.pipe(Schema.minLength(1)),
  namespace: Schema.optionalWith(Schema.String, { default: () => "default" }),
  /**
   * A YAML Job template with `{{placeholders}}` in its string values (see the rollout package's
   * `k8s/template.ts` for the list). Without it a one-container Job running `command` is used.
   */
  job_template: Schema.optional(Schema.String),
  /** The container that runs the harness (exit code and logs come from it); default: the first. */
  container: Schema.optional(Schema.String),
  /** `ttlSecondsAfterFinished` of every Job: finished Jobs (and their pods) are garbage-collected after it. */
  ttl_s: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 3600 }),
  service_account: Schema.optional(Schema.String),
  /** Extra seconds a Job may stay pending/unscheduled beyond `timeout_s + grace_s` before it is given up as lost. */
  stuck_slack_s: Schema.optionalWith(Seconds, { default: () => 300 })
}) {}

export class HarnessSpec extends Schema.Class<HarnessSpec>("HarnessSpec")({
  command: Argv,
  cwd: Schema.optional(Schema.String),
  env: Schema.optionalWith(EnvVars, { default: () => ({}) }),
  /** Local launcher: start from the node's own environment (PATH, HOME, ...) before adding `env`. */
  inherit_env: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  timeout_s: Schema.optionalWith(Seconds, { default: () => 600 }),
  /** Time between SIGTERM and SIGKILL (local) / the pod's termination grace period (Kubernetes). */
  grace_s: Schema.optionalWith(Schema.Number.pipe(Schema.nonNegative(), Schema.finite()), { default: () => 10 }),
  /** Cap of each captured log (stdout, stderr, pod log); the rest is dropped with a marker. */
  max_log_bytes: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 1 << 20 }),
  /** Local launcher: niceness of the harness's processes (see `Niceness`). */
  nice: Schema.optionalWith(Niceness, { default: () => 19 }),
  verifier: Schema.optional(VerifierSpec),
  kubernetes: Schema.optional(KubernetesHarnessSpec)
}) {}

// ---------------------------------------------------------------------------------------------
// Attempt outcomes

/** What a captured log holds: `bytes` written, `droppedBytes` beyond the cap. */
export class LogCapture extends Schema.Class<LogCapture>("LogCapture")({
  path: Schema.String,
  bytes: Schema.Int,
  droppedBytes: Schema.Int
}) {}

/** Files of one attempt (on the node that ran or followed it). */
export class AttemptLogs extends Schema.Class<AttemptLogs>("AttemptLogs")({
  stdout: LogCapture,
  stderr: LogCapture
}) {}

/** The harness exited 0 (local) or its Job completed (Kubernetes). */
export class AttemptSucceeded extends Schema.TaggedClass<AttemptSucceeded>()("Succeeded", {
  exitCode: Schema.Int,
  durationMs: Schema.Number,
  logs: AttemptLogs
}) {}

/**
 * A behaviour outcome: the harness ran and did not succeed. `exit`: non-zero exit code;
 * `timeout`: killed after `timeout_s` (or the Job's deadline); `signal`: died of a signal it was
 * not sent by the launcher.
 */
export const FailureReason = Schema.Literal("exit", "timeout", "signal")
export type FailureReason = typeof FailureReason.Type

export class AttemptFailed extends Schema.TaggedClass<AttemptFailed>()("Failed", {
  reason: FailureReason,
  exitCode: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String),
  message: Schema.String,
  durationMs: Schema.Number,
  logs: AttemptLogs
}) {}

/**
 * The infrastructure, not the harness, broke. `retryable` ones are retried as a new attempt;
 * `invalid-spec` (the API server rejected the Job) is not: the same spec would fail again.
 */
export const InfraReason = Schema.Literal(
  "spawn", // local: command not found, not executable, ...
  "bad-cwd", // local: the working directory does not exist
  "evicted", // pod evicted or disrupted (node pressure, preemption, node drain)
  "oom-killed", // the harness container was OOM-killed
  "image-pull", // ErrImagePull / ImagePullBackOff / InvalidImageName
  "node-lost", // the launcher node or the pod's node went away
  "lost", // the Job disappeared or never reached a terminal state in time
  "api", // the Kubernetes API kept failing (429/5xx/network) beyond the retry budget
  "invalid-spec", // 422 Invalid: the Job was rejected
  // the launcher stopped following a Job that runs on: it left it for another launcher to take
  // over (its node stopped with `leave`) or another launcher took it over; the controller hands
  // the attempt on, it never retries it (that would run it twice)
  "handed-over"
)
export type InfraReason = typeof InfraReason.Type

export class AttemptInfraFailed extends Schema.TaggedClass<AttemptInfraFailed>()("InfraFailed", {
  reason: InfraReason,
  retryable: Schema.Boolean,
  message: Schema.String,
  durationMs: Schema.Number,
  logs: Schema.NullOr(AttemptLogs)
}) {}

export class AttemptCancelled extends Schema.TaggedClass<AttemptCancelled>()("Cancelled", {
  reason: Schema.String,
  durationMs: Schema.Number,
  logs: Schema.NullOr(AttemptLogs)
}) {}

export const AttemptOutcome = Schema.Union(AttemptSucceeded, AttemptFailed, AttemptInfraFailed, AttemptCancelled)
export type AttemptOutcome = typeof AttemptOutcome.Type

// ---------------------------------------------------------------------------------------------
// Verifier

/** The reward a verifier printed: a number, or `{"reward": number, ...}` (the rest is `details`). */
export class VerifierReward extends Schema.TaggedClass<VerifierReward>()("VerifierReward", {
  value: Schema.Number.pipe(Schema.finite()),
  details: Schema.Unknown,
  durationMs: Schema.Number,
  logs: AttemptLogs
}) {}

export const VerifierFailure = Schema.Literal("spawn", "bad-cwd", "timeout", "exit", "garbage", "no-output")
export type VerifierFailure = typeof VerifierFailure.Type

/** The verifier did not produce a reward. Recorded with the attempt; never a crash. */
export class VerifierError extends Schema.TaggedError<VerifierError>()("VerifierError", {
  reason: VerifierFailure,
  message: Schema.String,
  exitCode: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String),
  /** The last KiB of the verifier's stdout / stderr, for the record. */
  stdoutTail: Schema.String,
  stderrTail: Schema.String,
  logs: Schema.NullOr(AttemptLogs)
}) {}

// ---------------------------------------------------------------------------------------------
// Launch errors (a launch that never got a harness running)

/** The local process could not be started (ENOENT, EACCES, bad cwd, ...). Infrastructure: retryable. */
export class SpawnError extends Schema.TaggedError<SpawnError>()("SpawnError", {
  reason: Schema.Literal("spawn", "bad-cwd"),
  code: Schema.NullOr(Schema.String),
  command: Schema.String,
  message: Schema.String
}) {}

/** The API server rejected the Job (422 Invalid, 400, 403, ...): retrying the same spec cannot help. */
export class JobRejectedError extends Schema.TaggedError<JobRejectedError>()("JobRejectedError", {
  status: Schema.Int,
  reason: Schema.String,
  jobName: Schema.String,
  message: Schema.String
}) {}

/** The Kubernetes API kept failing (429, 5xx, network) after retries. Infrastructure: retryable. */
export class KubernetesApiError extends Schema.TaggedError<KubernetesApiError>()("KubernetesApiError", {
  operation: Schema.String,
  status: Schema.NullOr(Schema.Int),
  message: Schema.String
}) {}

/** A Job with the attempt's name exists but belongs to a different attempt. */
export class JobNameConflictError extends Schema.TaggedError<JobNameConflictError>()("JobNameConflictError", {
  jobName: Schema.String,
  attemptId: Schema.String,
  existingAttemptId: Schema.NullOr(Schema.String),
  message: Schema.String
}) {}

/** Bad harness spec or launcher configuration detected before anything was started. */
export class LaunchConfigError extends Schema.TaggedError<LaunchConfigError>()("LaunchConfigError", {
  message: Schema.String
}) {}

export const LaunchError = Schema.Union(SpawnError, JobRejectedError, KubernetesApiError, JobNameConflictError, LaunchConfigError)
export type LaunchError = typeof LaunchError.Type

// ---------------------------------------------------------------------------------------------
// One attempt, end to end

/** What running one attempt produced: how the harness ended and, if a verifier ran, its verdict. */
export class AttemptResult extends Schema.Class<AttemptResult>("AttemptResult")({
  rolloutId: Schema.String,
  attemptId: Schema.String,
  outcome: AttemptOutcome,
  /** null when no verifier ran: none configured, or the harness never ran to an end (infra failure, cancel). */
  verifier: Schema.NullOr(Schema.Union(VerifierReward, VerifierError)),
  startedAt: Schema.Number,
  finishedAt: Schema.Number
}) {}
