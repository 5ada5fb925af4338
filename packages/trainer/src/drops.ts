/**
 * Counters of data that does not reach the loss, by reason (see `DropReason` in @reins/protocol
 * for the unit of each). Every stage adds to one; nothing is dropped without a count.
 */
import { DropCount, type DropCounts, DropReason, SegmentStart, type SegmentStarts } from "@reins/protocol"

/** A mutable tally a stage fills while it runs; `snapshot` turns it into the metrics record. */
export class DropTally {
  private readonly counts = new Map<DropReason, { count: number; actionTokens: number }>()

  add(reason: DropReason, count = 1, actionTokens = 0): void {
    const entry = this.counts.get(reason)
    if (entry === undefined) this.counts.set(reason, { count, actionTokens })
    else {
      entry.count += count
      entry.actionTokens += actionTokens
    }
  }

  count(reason: DropReason): number {
    return this.counts.get(reason)?.count ?? 0
  }

  actionTokens(reason: DropReason): number {
    return this.counts.get(reason)?.actionTokens ?? 0
  }

  /** Every reason, zeros included, so a metrics line always shows the whole picture. */
  snapshot(): DropCounts {
    const out = {} as Record<DropReason, DropCount>
    for (const reason of DropReason.literals) {
      const entry = this.counts.get(reason)
      out[reason] = new DropCount({ count: entry?.count ?? 0, actionTokens: entry?.actionTokens ?? 0 })
    }
    return out
  }

  /** Adds another tally's counts to this one. */
  merge(other: DropTally): this {
    for (const [reason, entry] of other.counts) this.add(reason, entry.count, entry.actionTokens)
    return this
  }
}

/** Segment starts by reason, every reason present. */
export const countStarts = (starts: Iterable<SegmentStart>): SegmentStarts => {
  const out = Object.fromEntries(SegmentStart.literals.map((s) => [s, 0])) as Record<SegmentStart, number>
  for (const s of starts) out[s] += 1
  return out
}
