/**
 * The staleness rules the simulation asks before it starts a group and before it trains. The
 * shape is the real Trainer's `StalenessGate` (packages/trainer/src/schedule/StalenessGate.ts),
 * so a test can run the simulation with that gate itself; the simulator keeps this copy because
 * importing the Trainer would load the whole policy stack into a pure simulation.
 *
 * - admission: a new group starts only while the groups admitted so far are fewer than
 *   consumed + (max_staleness + 1) × batch_groups (consumed = groups already trained);
 * - the gate: a group admitted at version s must be in update s + max_staleness at the latest; an
 *   update waits while such a group is still running, and a batch takes the oldest finished
 *   groups first (every due one, at least batch_groups).
 */

export interface GateGroup {
  readonly groupId: string
  readonly startVersion: number | null
  /** Order of admission (ties in start version go to the older group). */
  readonly seq: number
  readonly finished: boolean
}

export interface AdmissionGate {
  /** Asked before a group starts at `version`; true admits (and registers) it. */
  admit(groupId: string, version: number): boolean
  /** The groups of update `version`, oldest first, or null to wait. */
  select(groups: ReadonlyArray<GateGroup>, version: number): ReadonlyArray<string> | null
  /** The update that trained these groups is done: they free admission budget. */
  consume(groupIds: ReadonlyArray<string>): void
}

/** Makes the gate of a run; `maxStaleness` is the schedule's (0 for sync). */
export type GateFactory = (batchGroups: number, maxStaleness: number) => AdmissionGate

export const simGate: GateFactory = (batchGroups, maxStaleness) => {
  const started = new Map<string, number>()
  let admitted = 0
  let consumed = 0
  const isDue = (g: GateGroup, version: number) => {
    const s = started.get(g.groupId)
    return s !== undefined && s + maxStaleness <= version
  }
  return {
    admit: (groupId, at) => {
      if (started.has(groupId)) return true
      if (admitted >= consumed + (maxStaleness + 1) * batchGroups) return false
      started.set(groupId, at)
      admitted++
      return true
    },
    select: (groups, version) => {
      if (groups.some((g) => !g.finished && isDue(g, version))) return null
      const finished = groups.filter((g) => g.finished)
      if (finished.length < batchGroups) return null
      finished.sort((a, b) => started.get(a.groupId)! - started.get(b.groupId)! || a.seq - b.seq)
      const due = finished.filter((g) => isDue(g, version)).length
      return finished.slice(0, Math.max(batchGroups, due)).map((g) => g.groupId)
    },
    consume: (groupIds) => {
      for (const id of groupIds) started.delete(id)
      consumed += groupIds.length
    }
  }
}
