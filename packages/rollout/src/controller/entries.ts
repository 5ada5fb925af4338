/**
 * The controller's entry table: one entry per rollout it holds, indexed by phase so that a
 * scheduling pass looks only at waiting rollouts and recovery finds an attempt by its id. Plain
 * synchronous code: every change happens between two yields of one JS thread, so a cancel racing
 * a placement or a retry always sees a consistent entry.
 */
import type { HarnessSpec, RolloutEnded, Task } from "@reins/protocol"
import type { Deferred } from "effect"
import type { LauncherSlot } from "./launcherPool.js"
import type { LedgerAttempt } from "./ledger.js"

/**
 * `recovering`: an attempt left by a previous controller, or handed over from a lost launcher,
 * waiting for a launcher to adopt it (or for its recovery window to end).
 */
export type Phase = "waiting" | "placed" | "ended" | "recovering"

export interface Entry {
  readonly rolloutId: string
  readonly groupId: string
  readonly task: Task
  readonly taskExtra: Readonly<Record<string, unknown>> | undefined
  readonly harness: HarnessSpec
  attempt: LedgerAttempt
  /** Changed only through `EntryTable.setPhase` (it keeps the indexes). */
  phase: Phase
  /** The current attempt was resumed after a restart: it may only be joined, never started (its key is unknown). */
  resumed: boolean
  /** The launcher the attempt was handed over from (its Job may still run), while it waits for another to take it over. */
  handedFrom: string | null
  /** A TakeOver call for it is in flight. */
  offering: boolean
  /** Counts the recovery windows it entered: a deadline applies only to the window it was set for. */
  recoveries: number
  /** Counted against the start budget already (its first start; retries are free). */
  admitted: boolean
  /** Retry backoff: not placed before this time (ms). */
  notBefore: number
  slot: LauncherSlot | null
  startedAt: number | null
  cancelReason: string | null
  /** Completed to give up on a placed attempt (cancel whose launcher does not answer). */
  abort: Deferred.Deferred<void> | null
  readonly ended: Deferred.Deferred<RolloutEnded>
  /** Submission order: waiting rollouts are served oldest first (retries keep their place). */
  readonly seq: number
}

export type NewEntry = Pick<Entry, "rolloutId" | "groupId" | "task" | "taskExtra" | "harness" | "attempt" | "ended">

export class EntryTable {
  /** Every rollout held, by id; ended ones until forgotten beyond `retainEnded`. */
  readonly byId = new Map<string, Entry>()
  /** The rollout ids of each group. */
  readonly groups = new Map<string, ReadonlyArray<string>>()
  /** The entries in phase "waiting" (scheduling passes look at these only) and those not ended. */
  readonly waiting = new Set<Entry>()
  readonly live = new Set<Entry>()
  /** Entries in phase "recovering", by the attempt id a launcher may adopt. */
  readonly recovering = new Map<string, Entry>()
  /** Ended entries, oldest first, forgotten beyond `retainEnded`. */
  private readonly endedOrder: Array<Entry> = []
  private groupCounter = 0
  private seq = 0

  constructor(readonly retainEnded: number) {}

  /** A new entry; a `recovering` one was started (and admitted) by the previous controller. */
  add(fields: NewEntry, phase: "waiting" | "recovering"): Entry {
    const entry: Entry = {
      ...fields,
      phase,
      resumed: phase === "recovering",
      handedFrom: null,
      offering: false,
      recoveries: 0,
      admitted: phase === "recovering",
      notBefore: 0,
      slot: null,
      startedAt: null,
      cancelReason: null,
      abort: null,
      seq: this.seq++
    }
    this.byId.set(entry.rolloutId, entry)
    this.setPhase(entry, phase)
    return entry
  }

  /** Moves an entry to `phase`, keeping the indexes; `ended` is terminal. */
  setPhase(entry: Entry, phase: Phase): void {
    if (entry.phase === "ended") return
    if (entry.phase === "recovering") this.recovering.delete(entry.attempt.attemptId)
    entry.phase = phase
    if (phase === "recovering") this.recovering.set(entry.attempt.attemptId, entry)
    if (phase === "waiting") this.waiting.add(entry)
    else this.waiting.delete(entry)
    if (phase === "ended") {
      this.live.delete(entry)
      this.endedOrder.push(entry)
      this.forgetOld()
    } else this.live.add(entry)
  }

  /** Back to waiting with the same attempt (nothing started), not placed before `notBefore`. */
  requeue(entry: Entry, notBefore: number): void {
    this.setPhase(entry, "waiting")
    entry.slot = null
    entry.notBefore = notBefore
  }

  /** Waiting with a new attempt (a retry), not placed before `notBefore`. */
  retryWith(entry: Entry, attempt: LedgerAttempt, notBefore: number): void {
    this.requeue(entry, notBefore) // first: the recovering index is keyed by the old attempt's id
    entry.attempt = attempt
    entry.resumed = false
    entry.handedFrom = null
    entry.startedAt = null
    entry.abort = null
  }

  /** The waiting entries, oldest submission first. */
  waitingInOrder(): Array<Entry> {
    return [...this.waiting].sort((x, y) => x.seq - y.seq)
  }

  /** A group id of the form `<task id>#<n>` that is not taken. */
  nextGroupId(taskId: string): string {
    for (;;) {
      const id = `${taskId}#${this.groupCounter++}`
      if (!this.groups.has(id)) return id
    }
  }

  joinGroup(groupId: string, rolloutId: string): void {
    this.groups.set(groupId, [...(this.groups.get(groupId) ?? []), rolloutId])
  }

  private forgetOld(): void {
    while (this.endedOrder.length > this.retainEnded) {
      const old = this.endedOrder.shift()!
      this.byId.delete(old.rolloutId)
      const ids = this.groups.get(old.groupId)
      if (ids !== undefined && ids.every((id) => !this.byId.has(id))) this.groups.delete(old.groupId)
    }
  }
}
