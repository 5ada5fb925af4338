/**
 * The contract every launcher implements (local processes, Kubernetes Jobs). The controller
 * only ever talks to this interface: it launches an attempt, awaits its outcome, cancels it,
 * and after a restart adopts what a previous incarnation left running.
 *
 * A launch is Scope-bound: closing the scope stops the attempt (kills the process group /
 * deletes the Job) unless the launcher is configured to leave Jobs for a successor to adopt.
 */
import type { AttemptOutcome, HandedAttempt, LaunchError, LaunchSpec } from "@reins/protocol"
import { AttemptInfraFailed } from "@reins/protocol"
import type { Effect, Scope } from "effect"
import type { AttemptFiles } from "../harness/files.js"

/**
 * Everything needed to run one attempt (the wire form `LaunchSpec` without the controller's
 * `adoptOnly`): ids and key, the task and its extras (the verifier sees them, the harness never),
 * the harness spec and the Gateway's endpoints.
 */
export type AttemptSpec = Omit<LaunchSpec, "adoptOnly">

export interface AttemptHandle {
  readonly rolloutId: string
  readonly attemptId: string
  /** Local files of the attempt (logs, task files), also for Kubernetes (pod logs land here). */
  readonly files: AttemptFiles
  /** Waits for the attempt to end. Never fails: every ending is an `AttemptOutcome`. */
  readonly outcome: Effect.Effect<AttemptOutcome>
  /** Stops the attempt and waits for it; the outcome is `Cancelled` unless it had already ended. */
  readonly cancel: (reason: string) => Effect.Effect<AttemptOutcome>
}

export type LauncherKind = "local" | "kubernetes"

export interface Launcher {
  readonly kind: LauncherKind
  /** Where its attempts' files go (`<dataDir>/attempts/<attempt>/`: the task, the captured logs). */
  readonly dataDir: string
  /**
   * Starts an attempt. Fails only when nothing could be started (see `outcomeOfLaunchError`);
   * once it succeeds the harness is running (or its Job exists).
   */
  readonly launch: (spec: AttemptSpec) => Effect.Effect<AttemptHandle, LaunchError, Scope.Scope>
  /**
   * After a controller restart: takes over attempts a previous incarnation started. Kubernetes:
   * the Jobs labelled with this launcher's owner identity in its namespaces, followed again
   * (never recreated); other launchers' Jobs are left alone.
   * Local: processes cannot be re-attached; leftover process groups are killed and reported
   * (at the first call only; later calls report the same).
   */
  readonly adopt: Effect.Effect<ReadonlyArray<AdoptedAttempt>, LaunchError, Scope.Scope>
  /** Kubernetes: whether stopping the launcher leaves its Jobs running (`onScopeClose: "leave"`) instead of deleting them. */
  readonly leavesJobsRunning?: boolean
  /**
   * Takes over attempts a controller hands to this launcher because the launcher that ran them
   * went away (Kubernetes: their Jobs, whoever owns them, relabelled to this launcher and
   * followed; a Job that no longer exists is `Reaped`). Absent where nothing can be taken over
   * (local processes die with their node's launcher, or are reaped by its next incarnation).
   */
  readonly takeOver?: (attempts: ReadonlyArray<HandedAttempt>) => Effect.Effect<ReadonlyArray<AdoptedAttempt>, never, Scope.Scope>
}

/** An attempt found after a restart: followed again (`handle`), or already gone (`outcome`). */
export type AdoptedAttempt =
  | { readonly _tag: "Following"; readonly handle: AttemptHandle }
  | { readonly _tag: "Reaped"; readonly rolloutId: string | null; readonly attemptId: string; readonly outcome: AttemptOutcome }

/** A launch that never started is an infrastructure failure; only a rejected spec is not worth retrying. */
export const outcomeOfLaunchError = (e: LaunchError): AttemptInfraFailed => {
  switch (e._tag) {
    case "SpawnError":
      return new AttemptInfraFailed({ reason: e.reason, retryable: true, message: e.message, durationMs: 0, logs: null })
    case "KubernetesApiError":
      return new AttemptInfraFailed({ reason: "api", retryable: true, message: e.message, durationMs: 0, logs: null })
    case "JobRejectedError":
    case "JobNameConflictError":
    case "LaunchConfigError":
      return new AttemptInfraFailed({ reason: "invalid-spec", retryable: false, message: e.message, durationMs: 0, logs: null })
  }
}
