/**
 * The staleness bound of the async schedules, enforced by admission and never by discarding.
 *
 * Update t trains the policy of version t; a token sampled by version u has staleness t − u.
 * A group that started at version s only holds tokens of versions ≥ s, so if it is trained by
 * update s + max_staleness at the latest, none of its tokens is staler than the bound. Two rules
 * make that hold without throwing a slow rollout away:
 *
 * 1. **Admission** (the controller's hook): a new group may start only while the groups admitted
 *    so far are fewer than `consumed + (max_staleness + 1) × batch_groups`, where `consumed` is
 *    the number of groups already trained. Updates take `batch_groups` groups, so every admitted
 *    group has a place in one of the next `max_staleness + 1` updates.
 * 2. **The gate** (before every update): a group that started at s must be in update
 *    s + max_staleness at the latest. If such a group is still running, the update waits for it
 *    (generation goes on meanwhile), and batches take the oldest groups first.
 *
 * The synchronous schedule is the special case `max_staleness = 0` with `async_groups =
 * batch_groups`: every group of a version is admitted together and the next update waits for all.
 */

export interface GroupState {
  readonly groupId: string
  /** The version serving when the group's first rollout was admitted; null while none was. */
  readonly startVersion: number | null
  /** Order of submission (ties in start version go to the older group). */
  readonly seq: number
  readonly finished: boolean
}

export class StalenessGate {
  private readonly started = new Map<string, number>()
  private admittedCount = 0
  private consumed = 0

  constructor(
    readonly batchGroups: number,
    readonly maxStaleness: number
  ) {}

  /** Groups that may have been admitted in total: the admission budget. */
  get budget(): number {
    return this.consumed + (this.maxStaleness + 1) * this.batchGroups
  }

  /** Groups trained (or found untrainable) so far. */
  get consumedGroups(): number {
    return this.consumed
  }

  /**
   * Asked before a rollout of `groupId` starts at `version`. A group already admitted always may
   * (its other rollouts and retries); a new one only within the budget.
   */
  admit(groupId: string, version: number): boolean {
    if (this.started.has(groupId)) return true
    if (this.admittedCount >= this.budget) return false
    this.started.set(groupId, version)
    this.admittedCount++
    return true
  }

  startVersion(groupId: string): number | null {
    return this.started.get(groupId) ?? null
  }

  /** Whether `group` must be part of update `version` (it would be too stale for the next one). */
  isDue(groupId: string, version: number): boolean {
    const s = this.started.get(groupId)
    return s !== undefined && s + this.maxStaleness <= version
  }

  /**
   * The groups of update `version`, oldest first: every due group, topped up with the oldest
   * finished ones to `batchGroups`. `null` means wait: a due group is still running, or fewer than
   * `batchGroups` groups are finished (unless `flush`: no more groups are coming, train what is
   * there). Waiting never breaks the bound: the version only moves when an update happens.
   */
  select(groups: ReadonlyArray<GroupState>, version: number, flush = false): ReadonlyArray<string> | null {
    if (groups.some((g) => !g.finished && this.isDue(g.groupId, version))) return null
    const finished = groups.filter((g) => g.finished).sort((a, b) => this.age(a) - this.age(b) || a.seq - b.seq)
    if (finished.length === 0 || (finished.length < this.batchGroups && !flush)) return null
    // Sorted oldest first, so every due group comes before any group that is not due.
    const due = finished.filter((g) => this.isDue(g.groupId, version)).length
    return finished.slice(0, Math.max(this.batchGroups, due)).map((g) => g.groupId)
  }

  /** The groups of an update were trained (or found to hold nothing trainable): they free budget. */
  consume(groupIds: ReadonlyArray<string>): void {
    for (const id of groupIds) this.started.delete(id)
    this.consumed += groupIds.length
  }

  /** Restores the count of trained groups after a restart (nothing is running then). */
  restore(consumed: number): void {
    this.consumed = consumed
    this.admittedCount = consumed
    this.started.clear()
  }

  private age(g: GroupState): number {
    return this.started.get(g.groupId) ?? Number.MAX_SAFE_INTEGER
  }
}
