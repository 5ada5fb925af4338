/**
 * What a process's V8 collections were, from the lines `--trace-gc-nvp` prints (one per
 * collection, on stdout): young-generation scavenges (how many, their pauses, and the bytes each
 * promoted to the old generation) and full mark-compacts. The gateway bench starts both gateways
 * with it, so its report shows where a p99 comes from: a scavenge lands on a call now and then,
 * and its pause grows with what survives it.
 */
export const GC_TRACE_FLAG = "--trace-gc-nvp"

export interface GcSummary {
  readonly scavenges: number
  readonly scavenge_pause_mean_ms: number
  readonly scavenge_pause_max_ms: number
  /** Mean bytes a scavenge moved to the old generation, in KB. */
  readonly promoted_kb_per_scavenge: number
  readonly mark_compacts: number
  readonly mark_compact_pause_max_ms: number
}

const field = (line: string, name: string): number | null => {
  const m = new RegExp(`(?:^|\\s)${name}=([0-9.]+)`).exec(line)
  return m === null ? null : Number(m[1])
}

export const summarizeGcTrace = (output: string): GcSummary => {
  const scavenges: Array<{ pause: number; promoted: number }> = []
  const majors: Array<number> = []
  for (const line of output.split("\n")) {
    const kind = /\sgc=(\w+)\s/.exec(line)?.[1]
    const pause = field(line, "pause")
    if (kind === undefined || pause === null) continue
    if (kind === "s") scavenges.push({ pause, promoted: field(line, "promoted") ?? 0 })
    else if (kind === "mc" || kind === "mmc") majors.push(pause)
  }
  const mean = (xs: ReadonlyArray<number>) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length)
  return {
    scavenges: scavenges.length,
    scavenge_pause_mean_ms: mean(scavenges.map((s) => s.pause)),
    scavenge_pause_max_ms: Math.max(0, ...scavenges.map((s) => s.pause)),
    promoted_kb_per_scavenge: mean(scavenges.map((s) => s.promoted)) / 1024,
    mark_compacts: majors.length,
    mark_compact_pause_max_ms: Math.max(0, ...majors)
  }
}
