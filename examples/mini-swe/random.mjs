/** A small seeded PRNG (mulberry32) so that task sets and demos are reproducible from a seed. */
export const makeRandom = (seed) => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  /** An integer in [lo, hi]. */
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1))
  const pick = (items) => items[Math.floor(next() * items.length)]
  /** A shuffled copy (Fisher–Yates). */
  const shuffle = (items) => {
    const out = [...items]
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1))
      ;[out[i], out[j]] = [out[j], out[i]]
    }
    return out
  }
  /** `n` distinct items, in random order. */
  const sample = (items, n) => shuffle(items).slice(0, n)
  return { next, int, pick, shuffle, sample }
}
