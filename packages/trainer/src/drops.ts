/**
 * Counters of data that does not reach the loss, by reason (see `DropReason` in @reins/protocol
 * for the unit of each). Every stage adds to one; nothing is dropped without a count.
 */
import { DropCount, type DropCounts, DropReason, SegmentStart, type SegmentStarts } from "@reins/protocol"

/** A mutable tally a stage fills while it runs; `snapshot` turns it into the metrics record. */
export class DropTally {
  private readonly counts = new Map<DropReason, { count: number; actionTokens: number }>()

  add(reason: DropReason, count = 1, actionTokens = 0): void {
    const entry = this.counts.get(reason) ?? { count: 0, actionTokens: 0 }
    this.counts.set(reason, { count: entry.count + count, actionTokens: entry.actionTokens + actionTokens })
  }

  count(reason: DropReason): number {
    return this.counts.get(reason)?.count ?? 0
  }

  actionTokens(reason: DropReason): number {
    return this.counts.get(reason)?.actionTokens ?? 0
  }

  /** Every reason, zeros included, so a metrics line always shows the whole picture. */
  snapshot(): DropCounts {
    return Object.fromEntries(
      DropReason.literals.map((reason) => [reason, new DropCount({ count: this.count(reason), actionTokens: this.actionTokens(reason) })])
    ) as Record<DropReason, DropCount>
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
