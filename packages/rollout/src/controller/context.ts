/**
 * What the controller's parts share: its configuration (as given and with defaults applied), the
 * ledger, the entry table, the launcher pool, the scope its fibers run in and the scheduler's
 * wake-up. Built once by `makeRolloutController`.
 */
import type { AttemptFinished, HarnessSpec } from "@reins/protocol"
import { Duration, Effect, type PubSub, type Scope } from "effect"
import type { AttemptEndpoints } from "../harness/env.js"
import type { FailedRewardPolicy } from "../outcome.js"
import type { EntryTable } from "./entries.js"
import type { LauncherPool } from "./launcherPool.js"
import type { AttemptLedgerService } from "./ledger.js"

export interface ControllerConfig {
  /** How every rollout runs (a submission may override it). */
  readonly harness: HarnessSpec
  /** The Gateway's agent-facing URLs handed to harnesses. */
  readonly endpoints: AttemptEndpoints
  /** Attempts per rollout: the first plus retries of infrastructure failures (default 3). */
  readonly maxAttempts?: number
  /** Delay before retry n is `initial * 2^(n-1)`, at most `max` (default 1 s .. 30 s). */
  readonly retryBackoff?: { readonly initial: Duration.DurationInput; readonly max: Duration.DurationInput }
  /** Reward of a harness that failed (non-zero exit, timeout): `zero` (default), `drop`, or `verifier`. */
  readonly onFailed?: FailedRewardPolicy
  /** A scheduling pass runs at least this often (default 1 s): launchers are rediscovered; membership events and attempt ends wake it sooner. */
  readonly rescanInterval?: Duration.DurationInput
  /**
   * Ended rollouts remembered for `awaitRollout` / `awaitGroup` (default 100,000); older ones are
   * forgotten, oldest first (the ledger keeps everything).
   */
  readonly retainEnded?: number
  /**
   * Recorded with every rollout this controller creates (default "reins"): a restarted controller
   * resumes only rollouts recorded with its own id (several controllers may share one store).
   */
  readonly controllerId?: string
  /**
   * After a restart, how long attempts left by the previous controller wait for a launcher to
   * adopt them before they are failed as `node-lost` and retried (default 10 s).
   */
  readonly recoveryWindow?: Duration.DurationInput
  /**
   * What closing the controller does to rollouts that have not ended: `cancel` them (default), or
   * `leave` them in the ledger for the next controller to resume (a rolling restart; Kubernetes
   * launchers with `onScopeClose: "leave"` keep their Jobs running meanwhile).
   */
  readonly onStop?: "cancel" | "leave"
  /** The initial start budget (see `setBudget`); default null = unlimited. */
  readonly budget?: number | null
}

/** The configuration with its defaults applied. */
export const settingsOf = (config: ControllerConfig) => ({
  harness: config.harness,
  endpoints: config.endpoints,
  maxAttempts: Math.max(1, Math.floor(config.maxAttempts ?? 3)),
  backoffInitialMs: Duration.toMillis(config.retryBackoff?.initial ?? "1 second"),
  backoffMaxMs: Duration.toMillis(config.retryBackoff?.max ?? "30 seconds"),
  onFailed: config.onFailed ?? "zero",
  retainEnded: Math.max(0, Math.floor(config.retainEnded ?? 100_000)),
  controllerId: config.controllerId ?? "reins",
  recoveryWindow: Duration.decode(config.recoveryWindow ?? "10 seconds")
})

export interface ControllerContext {
  readonly settings: ReturnType<typeof settingsOf>
  readonly ledger: AttemptLedgerService
  readonly table: EntryTable
  readonly pool: LauncherPool
  /** Where the controller's fibers run (see `makeRolloutController`). */
  readonly scope: Scope.Scope
  /** Asks for a scheduling pass. */
  readonly wake: Effect.Effect<void>
  readonly finished: PubSub.PubSub<AttemptFinished>
}

/** Runs `effect`, logging a failure as a warning instead (the controller goes on). */
export const logged = <A, E extends { readonly message: string }>(what: string, effect: Effect.Effect<A, E>) =>
  Effect.catchAll(effect, (e) => Effect.as(Effect.logWarning(`controller: ${what}: ${e.message}`), undefined))
