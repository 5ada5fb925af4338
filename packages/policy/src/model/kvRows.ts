/**
 * The KV memory of a device decoder (webgpuDecode.ts; tests' reference decoders): one pool of rows per
 * layer for keys and one for values, of which each sequence's cache is a contiguous range, handed
 * out first-fit in blocks of 64 rows.
 */

/** A sequence's cache: rows start..start+capacity of every layer's pools. */
export class TensorKvCache {
  length = 0
  constructor(readonly start: number, readonly capacity: number) {}
}

/** The new tokens of one sequence. */
export interface TensorChunk {
  readonly cache: TensorKvCache
  readonly ids: Int32Array
}

/** Caches are handed out in blocks of this many rows. */
export const BLOCK = 64

/** First-fit ranges of a pool's rows; freed neighbours merge. */
export class RowRanges {
  private free: Array<{ start: number; size: number }>

  constructor(readonly rows: number) {
    this.free = rows > 0 ? [{ start: 0, size: rows }] : []
  }

  alloc(size: number): number | undefined {
    const i = this.free.findIndex((r) => r.size >= size)
    if (i < 0) return undefined
    const r = this.free[i]!
    const start = r.start
    if (r.size === size) this.free.splice(i, 1)
    else (r.start += size), (r.size -= size)
    return start
  }

  release(start: number, size: number): void {
    let i = this.free.findIndex((r) => r.start > start)
    if (i < 0) i = this.free.length
    this.free.splice(i, 0, { start, size })
    const next = this.free[i + 1]
    if (next !== undefined && start + size === next.start) this.free[i]!.size += this.free.splice(i + 1, 1)[0]!.size
    const prev = this.free[i - 1]
    if (prev !== undefined && prev.start + prev.size === start) prev.size += this.free.splice(i, 1)[0]!.size
  }
}

/** The rows of a decoder's pools and the caches made of them. */
export class KvRows {
  readonly ranges: RowRanges

  /**
   * `fits`: the rows the pools' memory holds; no more are taken than `maxSequences` caches of the
   * whole context need.
   */
  constructor(private readonly context: number, fits: number, maxSequences: number) {
    this.ranges = new RowRanges(Math.min(Math.floor(fits / BLOCK) * BLOCK, maxSequences * Math.ceil(context / BLOCK) * BLOCK))
  }

  get rows(): number {
    return this.ranges.rows
  }

  /** The most tokens one cache can hold: the context, or what the pools hold if that is less. */
  get maxCacheTokens(): number {
    return Math.min(this.context, this.ranges.rows)
  }

  /** A cache of at least `capacity` tokens (whole blocks), or undefined while the pools are full. */
  tryNewCache(capacity: number): TensorKvCache | undefined {
    const rows = Math.min(this.maxCacheTokens, Math.ceil(Math.max(1, capacity) / BLOCK) * BLOCK)
    if (rows === 0) return undefined
    const start = this.ranges.alloc(rows)
    return start === undefined ? undefined : new TensorKvCache(start, rows)
  }

  releaseCache(cache: TensorKvCache): void {
    this.ranges.release(cache.start, cache.capacity)
  }
}
