/**
 * A small seeded PRNG (SplitMix32 seeding xoshiro128**), so weight initialisation and sampling
 * are reproducible across backends, processes and machines: the same seed gives the same
 * numbers everywhere.
 */
export class Rng {
  private a: number
  private b: number
  private c: number
  private d: number
  private spare: number | undefined

  constructor(seed: number) {
    let s = seed >>> 0
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0
      let z = s
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
      return (z ^ (z >>> 16)) >>> 0
    }
    this.a = next()
    this.b = next()
    this.c = next()
    this.d = next()
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1
  }

  /** A uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5) >>> 0, 7), 9) >>> 0
    const t = (this.b << 9) >>> 0
    this.c = (this.c ^ this.a) >>> 0
    this.d = (this.d ^ this.b) >>> 0
    this.b = (this.b ^ this.c) >>> 0
    this.a = (this.a ^ this.d) >>> 0
    this.c = (this.c ^ t) >>> 0
    this.d = rotl(this.d, 11)
    return result
  }

  /** Uniform in [0, 1) with 53 bits of precision. */
  uniform(): number {
    const hi = this.nextUint32() >>> 5
    const lo = this.nextUint32() >>> 6
    return (hi * 67108864 + lo) / 9007199254740992
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    if (this.spare !== undefined) {
      const s = this.spare
      this.spare = undefined
      return s
    }
    let u = 0
    while (u === 0) u = this.uniform()
    const v = this.uniform()
    const r = Math.sqrt(-2 * Math.log(u))
    this.spare = r * Math.sin(2 * Math.PI * v)
    return r * Math.cos(2 * Math.PI * v)
  }
}

const rotl = (x: number, k: number): number => ((x << k) | (x >>> (32 - k))) >>> 0

/** A seed from the OS entropy pool, for requests that do not ask for reproducibility. */
export const randomSeed = (): number => crypto.getRandomValues(new Uint32Array(1))[0]!
