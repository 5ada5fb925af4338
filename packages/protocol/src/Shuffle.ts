/**
 * Seeded shuffles that every node and every version computes identically: the task queue's
 * epoch orders and the SFT plan's epochs depend on them, so they must never change.
 */

/** mulberry32: a tiny, fast seeded PRNG in [0, 1), good enough for shuffling. */
export const seededRandom = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Fisher–Yates in place, drawing from `random`; returns `items`. */
export const shuffleInPlace = <A extends { length: number; [i: number]: number }>(items: A, random: () => number): A => {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    const t = items[i]!
    items[i] = items[j]!
    items[j] = t
  }
  return items
}
