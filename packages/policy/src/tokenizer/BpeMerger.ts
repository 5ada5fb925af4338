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
  /** Rank of the merge of `left` and `right`, or -1 when they do not merge. */
  readonly rank: (left: number, right: number) => number
  /** The id of the token that merge `rank` produces. */
  readonly result: Int32Array
}

/**
 * Builds a `MergeTable` from the merges in rank order: `left[k] + right[k] → result[k]`.
 *
 * An open-addressing hash table over typed arrays: a 150k-merge vocabulary (Qwen, Llama 3)
 * builds in milliseconds and a lookup allocates nothing, where a `Map` keyed by `l * size + r`
 * hashes heap numbers (the key outgrows small integers) and is built from 150k tuples.
 */
export const makeMergeTable = (left: Int32Array, right: Int32Array, result: Int32Array): MergeTable => {
  const n = result.length
  let capacity = 16
  while (capacity < n * 2) capacity *= 2
  const mask = capacity - 1
  const keyL = new Int32Array(capacity).fill(-1)
  const keyR = new Int32Array(capacity)
  const ranks = new Int32Array(capacity)
  const slot = (l: number, r: number) => (Math.imul(l, 0x9e3779b1) ^ Math.imul(r + 0x7f4a7c15, 0x85ebca77)) >>> 0
  for (let k = 0; k < n; k++) {
    const l = left[k]!
    const r = right[k]!
    let i = slot(l, r) & mask
    while (keyL[i] !== -1 && (keyL[i] !== l || keyR[i] !== r)) i = (i + 1) & mask
    // A duplicated pair keeps its first (lowest) rank, as a Map built from the merge list would.
    if (keyL[i] === -1) {
      keyL[i] = l
      keyR[i] = r
      ranks[i] = k
    }
  }
  const rank = (l: number, r: number): number => {
    for (let i = slot(l, r) & mask; ; i = (i + 1) & mask) {
      const kl = keyL[i]!
      if (kl === -1) return -1
      if (kl === l && keyR[i] === r) return ranks[i]!
    }
  }
  return { rank, result }
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
    if (rank >= 0) heap.push(rank * n + i)
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
