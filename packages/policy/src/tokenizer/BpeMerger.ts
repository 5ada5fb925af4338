/**
 * Applies learned BPE merges to one pre-tokenizer word, on token ids.
 *
 * Semantics (the same as Hugging Face `tokenizers`): repeatedly merge the adjacent pair with the
 * lowest merge rank, the leftmost one first when the same pair occurs several times, until no
 * adjacent pair has a merge. A binary heap of (rank, position) over a linked list of symbols
 * keeps long words (a 10 kB run of letters or spaces) at O(n log n) instead of O(n²).
 */

/** A merge table keyed by the ids of the two parts. */
export interface MergeTable {
  /** Rank of the merge of `left` and `right`, or undefined when they do not merge. */
  readonly rank: (left: number, right: number) => number | undefined
  /** The id of the token that merge `rank` produces. */
  readonly result: Int32Array
}

/** Builds a `MergeTable` from `[leftId, rightId, resultId]` triples in rank order. */
export const makeMergeTable = (merges: ReadonlyArray<readonly [number, number, number]>, vocabSize: number): MergeTable => {
  const ranks = new Map<number, number>()
  const result = new Int32Array(merges.length)
  merges.forEach(([l, r, m], rank) => {
    const key = l * vocabSize + r
    // A duplicated pair keeps its first (lowest) rank, as a Map built from the merge list would.
    if (!ranks.has(key)) ranks.set(key, rank)
    result[rank] = m
  })
  return { rank: (l, r) => ranks.get(l * vocabSize + r), result }
}

/** Merges the symbol ids of one word (already mapped from bytes) in place; returns the result. */
export const mergeWord = (table: MergeTable, symbols: Int32Array): Int32Array => {
  const n = symbols.length
  if (n < 2) return symbols
  const sym = symbols
  const next = new Int32Array(n)
  const prev = new Int32Array(n)
  const alive = new Uint8Array(n).fill(1)
  for (let i = 0; i < n; i++) {
    next[i] = i + 1 < n ? i + 1 : -1
    prev[i] = i - 1
  }
  const heap = new MinHeap()
  // Heap keys order by rank, then by position: key = rank * n + position.
  const push = (i: number) => {
    const j = next[i]!
    if (j < 0) return
    const rank = table.rank(sym[i]!, sym[j]!)
    if (rank !== undefined) heap.push(rank * n + i)
  }
  for (let i = 0; i < n - 1; i++) push(i)

  while (heap.size > 0) {
    const key = heap.pop()
    const i = key % n
    const rank = (key - i) / n
    const j = next[i]!
    // Stale entry: the left symbol was absorbed, or the pair at i has changed since the push.
    if (!alive[i] || j < 0 || table.rank(sym[i]!, sym[j]!) !== rank) continue
    sym[i] = table.result[rank]!
    alive[j] = 0
    const k = next[j]!
    next[i] = k
    if (k >= 0) prev[k] = i
    if (prev[i]! >= 0) push(prev[i]!)
    push(i)
  }

  let count = 0
  for (let i = 0; i >= 0; i = next[i]!) count++
  const out = new Int32Array(count)
  let w = 0
  for (let i = 0; i >= 0; i = next[i]!) out[w++] = sym[i]!
  return out
}

/** A binary min-heap of non-negative numbers (exact integers below 2^53). */
class MinHeap {
  private items: Array<number> = []

  get size(): number {
    return this.items.length
  }

  push(x: number): void {
    const a = this.items
    a.push(x)
    let i = a.length - 1
    while (i > 0) {
      const p = (i - 1) >> 1
      if (a[p]! <= x) break
      a[i] = a[p]!
      i = p
    }
    a[i] = x
  }

  pop(): number {
    const a = this.items
    const top = a[0]!
    const last = a.pop()!
    if (a.length > 0) {
      let i = 0
      const n = a.length
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const c = l + 1 < n && a[l + 1]! < a[l]! ? l + 1 : l
        if (a[c]! >= last) break
        a[i] = a[c]!
        i = c
      }
      a[i] = last
    }
    return top
  }
}
