/**
 * The Rollout Controller's actor protocols.
 *
 * - `LauncherRpcs`: the launcher actor `rollout/<node id>` on every node with the `rollout` role.
 *   `Launch` runs one attempt (harness, then verifier) on that node and streams its progress:
 *   `Started` once the harness runs, `Finished` with the `AttemptResult` when it has ended. The
 *   verifier runs on the launcher node because the harness's captured output lives there.
 * - `ControllerRpcs`: the controller actor `controller` (hosted next to the Gateway's store):
 *   submit task groups, cancel, a server-streamed feed of attempt-finished events, pushed as
 *   attempts end (the Trainer subscribes; nothing polls), and the admission start budget the
 *   Trainer raises after every policy version to bound staleness.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { Probe } from "@reins/runtime"
import { Schema } from "effect"
import { AttemptOutcome, AttemptResult, HarnessSpec, Task, VerifierError, VerifierReward } from "./Rollout.js"
import { AttemptState } from "./StoreSchema.js"

// ---------------------------------------------------------------------------------------------
// Launcher actor

/** Where the harness reaches the Gateway (`openaiBaseUrl` is the agent-facing `/v1` URL). */
export const AttemptEndpointsSchema = Schema.Struct({
  openaiBaseUrl: Schema.String,
  rewardUrl: Schema.optional(Schema.String)
})

/** Everything a launcher node needs to run one attempt (the wire form of the rollout package's `AttemptSpec`). */
export const LaunchSpec = Schema.Struct({
  rolloutId: Schema.String,
  attemptId: Schema.String,
  /** The Gateway's key for this attempt. */
  attemptKey: Schema.String,
  task: Task,
  /** Task-line fields beyond id/input/split: the verifier sees them, the harness never. */
  taskExtra: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  harness: HarnessSpec,
  endpoints: AttemptEndpointsSchema,
  /**
   * Only join the attempt if this launcher follows it (adopted after a restart, see `Adopt`);
   * never start it anew (a controller resuming an attempt it no longer has the key of).
   */
  adoptOnly: Schema.optional(Schema.Boolean)
})
export type LaunchSpec = typeof LaunchSpec.Type

/** The harness of the attempt is running on `node`. */
export class LaunchStarted extends Schema.TaggedClass<LaunchStarted>()("Started", {
  node: Schema.String,
  startedAt: Schema.Number
}) {}

/** The attempt has ended (the verifier, if any, has run). Always the last update of a launch. */
export class LaunchFinished extends Schema.TaggedClass<LaunchFinished>()("Finished", {
  node: Schema.String,
  result: AttemptResult
}) {}

export const LaunchUpdate = Schema.Union(LaunchStarted, LaunchFinished)
export type LaunchUpdate = typeof LaunchUpdate.Type

/** The launcher node runs as many attempts as it may: nothing was started, place the attempt elsewhere. */
export class LauncherFull extends Schema.TaggedError<LauncherFull>()("LauncherFull", {
  node: Schema.String,
  max: Schema.Int,
  running: Schema.Int
}) {
  override get message() {
    return `launcher on node ${this.node} is full (${this.running}/${this.max} attempts running)`
  }
}

/** This attempt already runs on this node: a second launch of it is refused (an attempt never runs twice). */
export class AttemptAlreadyRunning extends Schema.TaggedError<AttemptAlreadyRunning>()("AttemptAlreadyRunning", {
  node: Schema.String,
  attemptId: Schema.String
}) {
  override get message() {
    return `attempt ${this.attemptId} already runs on node ${this.node}`
  }
}

/** An `adoptOnly` launch of an attempt this launcher does not follow: nothing was started. */
export class AttemptNotAdopted extends Schema.TaggedError<AttemptNotAdopted>()("AttemptNotAdopted", {
  node: Schema.String,
  attemptId: Schema.String
}) {
  override get message() {
    return `attempt ${this.attemptId} is not followed on node ${this.node} (never adopted there, or its end was already reported)`
  }
}

export class LauncherCapacity extends Schema.Class<LauncherCapacity>("LauncherCapacity")({
  node: Schema.String,
  /** "local" | "kubernetes" */
  kind: Schema.String,
  max: Schema.Int,
  running: Schema.Int,
  /**
   * Kubernetes: what stopping the launcher's node does to its Jobs — `delete` them (the controller
   * retries their attempts) or `leave` them running (the controller hands them to another
   * launcher, `TakeOver`).
   */
  onStop: Schema.optional(Schema.Literal("delete", "leave"))
}) {}

/**
 * What a launcher took over from a previous incarnation (asked by a controller when it discovers
 * the launcher, e.g. after a controller restart).
 */
export class AdoptedAttempts extends Schema.Class<AdoptedAttempts>("AdoptedAttempts")({
  /**
   * Attempts this launcher follows although nobody launched them here in this incarnation
   * (Kubernetes Jobs found by label). `Launch` of the same attempt id joins the running one:
   * nothing is started twice.
   */
  following: Schema.Array(Schema.String),
  /** Attempts a previous incarnation of this launcher ran that are gone (local process groups reaped at start). */
  gone: Schema.Array(Schema.String)
}) {}

/** An attempt a controller hands to another launcher (its launcher went away), and the namespace of its Job. */
export const HandedAttempt = Schema.Struct({ attemptId: Schema.String, namespace: Schema.String })
export type HandedAttempt = typeof HandedAttempt.Type

/** The tail of one captured log of an attempt (harness or verifier, stdout or stderr), as its launcher kept it. */
export class AttemptLogTail extends Schema.Class<AttemptLogTail>("AttemptLogTail")({
  name: Schema.Literal("stdout", "stderr", "verifier.stdout", "verifier.stderr"),
  /** The whole file's size. */
  bytes: Schema.Int,
  /** True when `text` is only the end of it. */
  truncated: Schema.Boolean,
  text: Schema.String
}) {}

export class LauncherRpcs extends RpcGroup.make(
  /** Runs one attempt; the stream ends after `Finished`. Interrupting the call stops the attempt. */
  Rpc.make("Launch", {
    payload: { spec: LaunchSpec },
    success: LaunchUpdate,
    error: Schema.Union(LauncherFull, AttemptAlreadyRunning, AttemptNotAdopted),
    stream: true
  }),
  /** Stops a running attempt (its `Launch` then finishes with a `Cancelled` outcome). False when it does not run here. */
  Rpc.make("Cancel", { payload: { attemptId: Schema.String, reason: Schema.String }, success: Schema.Boolean }),
  Rpc.make("Capacity", { success: LauncherCapacity }),
  /**
   * Takes over what earlier incarnations left (idempotent): Kubernetes Jobs by label. An adopted
   * attempt nobody launches again keeps running until `Cancel` or its end.
   */
  Rpc.make("Adopt", { success: AdoptedAttempts }),
  /**
   * Takes over attempts whose launcher went away (a rollout node stopped, was replaced, or is
   * down), asked by the controller: their Kubernetes Jobs, whoever owns them, become this
   * launcher's and are followed like adopted ones (`following`; join them with an `adoptOnly`
   * `Launch`); attempts whose Job no longer exists are `gone`. A launcher that cannot take
   * anything over (local processes) answers every attempt as `gone`.
   */
  Rpc.make("TakeOver", { payload: { attempts: Schema.Array(HandedAttempt) }, success: AdoptedAttempts }),
  /** The tails of an attempt's captured logs, if this launcher ran it (empty otherwise): the dashboard's read. */
  Rpc.make("Logs", { payload: { attemptId: Schema.String }, success: Schema.Array(AttemptLogTail) }),
  /** Liveness, answered like the runtime's probe actor (`reins status` tooling and cluster checks ping `rollout/<node>`). */
  Rpc.make("Ping", { success: Probe.Pong })
) {}

/** The registered name of the launcher actor on a node. */
export const launcherActorName = (node: string): string => `rollout/${node}`
export const LAUNCHER_ACTOR_PREFIX = "rollout/"

// ---------------------------------------------------------------------------------------------
// Controller actor

/** Where a reward came from: the verifier, the reward policy for failed attempts, or the harness itself (`/v1/reward`). */
export const RewardSource = Schema.Literal("verifier", "policy", "harness")
export type RewardSource = typeof RewardSource.Type

/** Pushed once per attempt when it has ended and everything about it is recorded. */
export class AttemptFinished extends Schema.Class<AttemptFinished>("AttemptFinished")({
  rolloutId: Schema.String,
  attemptId: Schema.String,
  /** 0 for the first attempt of the rollout, 1 for its first retry, ... */
  attemptIndex: Schema.Int,
  groupId: Schema.String,
  taskId: Schema.String,
  /** The launcher node that ran it (null when it never reached one, e.g. cancelled while waiting). */
  node: Schema.NullOr(Schema.String),
  outcome: AttemptOutcome,
  verifier: Schema.NullOr(Schema.Union(VerifierReward, VerifierError)),
  /** The reward recorded for this attempt, null when none (dropped, no verifier and none posted, infra failure). */
  reward: Schema.NullOr(Schema.Number),
  rewardSource: Schema.NullOr(RewardSource),
  /** A failed attempt excluded from training by the `drop` reward policy. */
  dropped: Schema.Boolean,
  /** The state recorded for the attempt. */
  state: AttemptState,
  reason: Schema.String,
  /** True when the rollout ends with this attempt; false when a new attempt retries it. */
  final: Schema.Boolean,
  startedAt: Schema.NullOr(Schema.Number),
  finishedAt: Schema.Number
}) {}

/** The terminal state of a rollout, with why. */
export class RolloutEnded extends Schema.Class<RolloutEnded>("RolloutEnded")({
  rolloutId: Schema.String,
  groupId: Schema.String,
  taskId: Schema.String,
  state: Schema.Literal("succeeded", "failed", "cancelled"),
  reason: Schema.String,
  attempts: Schema.Int,
  reward: Schema.NullOr(Schema.Number)
}) {}

export class SubmittedGroup extends Schema.Class<SubmittedGroup>("SubmittedGroup")({
  groupId: Schema.String,
  rolloutIds: Schema.Array(Schema.String)
}) {}

export class ControllerStatus extends Schema.Class<ControllerStatus>("ControllerStatus")({
  /** Rollouts waiting for admission, capacity or their retry backoff. */
  waiting: Schema.Int,
  /** Attempts placed on a launcher (starting or running). */
  running: Schema.Int,
  ended: Schema.Int,
  /** The waiting head was refused by the admission hook or the start budget at the last pass. */
  admissionBlocked: Schema.Boolean,
  /** Rollouts started by this controller (first attempts placed; rollouts it recovered after a restart count too). */
  started: Schema.Int,
  /** The start budget: at most this many rollouts may have been started; null = unlimited. */
  budget: Schema.NullOr(Schema.Int),
  /** Attempts left by a previous controller that wait for a launcher to adopt them. */
  recovering: Schema.Int,
  launchers: Schema.Array(LauncherCapacity)
}) {}

/** The controller could not do what was asked (the ledger failed, unknown rollout, bad submission). */
export class ControllerError extends Schema.TaggedError<ControllerError>()("ControllerError", {
  message: Schema.String
}) {}

export class ControllerRpcs extends RpcGroup.make(
  /** Submits a GRPO group: `size` rollouts of one task (the controller's harness spec runs them). */
  Rpc.make("Submit", {
    payload: {
      task: Task,
      size: Schema.Int.pipe(Schema.between(1, 10_000)),
      groupId: Schema.optional(Schema.String),
      taskExtra: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
    },
    success: SubmittedGroup,
    error: ControllerError
  }),
  /** Cancels a rollout; false when it had already ended (or is unknown). */
  Rpc.make("Cancel", { payload: { rolloutId: Schema.String, reason: Schema.String }, success: Schema.Boolean }),
  /** Cancels every rollout that has not ended; returns how many. */
  Rpc.make("CancelAll", { payload: { reason: Schema.String }, success: Schema.Int }),
  /** Waits until every rollout of the group has ended. */
  Rpc.make("AwaitGroup", { payload: { groupId: Schema.String }, success: Schema.Array(RolloutEnded), error: ControllerError }),
  /** Attempt-finished events from now on, as they happen. */
  Rpc.make("Events", { success: AttemptFinished, stream: true }),
  Rpc.make("Status", { success: ControllerStatus }),
  /**
   * The start budget (admission that crosses the wire): at most `budget` rollouts may have been
   * started by this controller in total (`Status().started`); retries of started rollouts never
   * consume it. `null` = unlimited (the default). The Trainer raises it after every policy
   * version, e.g. `(version + maxStaleness + 1) * batchRollouts`. Answers the status after the change.
   */
  Rpc.make("SetAdmission", {
    payload: { budget: Schema.NullOr(Schema.Int.pipe(Schema.nonNegative())) },
    success: ControllerStatus,
    error: ControllerError
  })
) {}
