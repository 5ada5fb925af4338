/**
 * What one mode's run leaves behind, as plain data: the rollouts as the store recorded them, the
 * Trainer's versions, and the device intervals seen by instrumenting the Trainer's ports. Every
 * figure, the timeline and the workload profile are pure functions of these records (so the
 * tests can feed them synthetic ones). Times are milliseconds since the epoch (the store's clock).
 */

export const modes = ["sync", "collocated-drain", "collocated-interrupt", "split"] as const
export type Mode = (typeof modes)[number]

export interface Interval {
  readonly start: number
  readonly end: number
}

export interface CallRec {
  readonly receivedAt: number
  /** When generation began (after the pause gate); null when it never did. */
  readonly startedAt: number | null
  readonly finishedAt: number
  readonly heldMs: number
  readonly promptTokens: number
  readonly outputTokens: number
  readonly status: number
  /** The recorded error (`code: message`), null for a 200. */
  readonly error: string | null
  /** Lowest and highest policy version of the call's tokens (null without tokens). */
  readonly minVersion: number | null
  readonly maxVersion: number | null
}

export interface RolloutRec {
  readonly id: string
  readonly group: string | null
  readonly state: string
  readonly reward: number | null
  readonly createdAt: number
  /** The last attempt's start and end (null while it did not start / did not end). */
  readonly startedAt: number | null
  readonly finishedAt: number | null
  readonly attempts: number
  /** The last attempt's calls, in order. */
  readonly calls: ReadonlyArray<CallRec>
  readonly trained: boolean
}

export interface VersionRec {
  readonly version: number
  /** When the Trainer published it. */
  readonly at: number
  readonly wallSeconds: number
  readonly rollouts: number
  readonly tokens: number
  readonly actionTokens: number
  readonly rewardMean: number | null
  readonly passRate: number | null
  readonly staleness: ReadonlyArray<number>
  readonly stalenessMax: number
  readonly pauseSeconds: number
  readonly heldCalls: number
  readonly device: { readonly generating: number; readonly training: number; readonly idle: number }
}

export interface TrainRec extends Interval {
  /** Tokens of the training rows (prompts and observations included). */
  readonly tokens: number
}

export interface ModeRecords {
  readonly mode: Mode
  readonly devices: number
  /** The tfjs backend the device(s) ran on (the device's own answer: webgpu, wasm, ...). */
  readonly backend: string
  readonly repeat: number
  /** The training run started (tasks handed out from here) and ended (last version published). */
  readonly t0: number
  readonly tEnd: number
  readonly rollouts: ReadonlyArray<RolloutRec>
  readonly versions: ReadonlyArray<VersionRec>
  /** Gateway paused → resumed (sync and collocated). */
  readonly pauses: ReadonlyArray<Interval>
  /** Updates on the training device. */
  readonly trains: ReadonlyArray<TrainRec>
  /** Split: weights swapped into the generation device. */
  readonly syncs: ReadonlyArray<Interval>
  /** Updates skipped because their batch held nothing trainable (zero reward variance). */
  readonly skipped: number
  readonly timedOut: boolean
  readonly finalPassAt1: number | null
  readonly basePassAt1: number | null
}
