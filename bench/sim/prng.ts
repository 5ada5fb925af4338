/**
 * Seeded randomness for the simulation: every run with the same seed replays the same workload,
 * so sweeps are comparable point to point and tests can assert exact equality.
 */

/** splitmix32-style generator: tiny, fast, good enough for workload sampling (not crypto). */
export const makeRng = (seed: number): (() => number) => {
  let s = seed >>> 0
  return () => {
    s = (s + 0x9e3779b9) >>> 0
    let z = s
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
    return ((z ^ (z >>> 16)) >>> 0) / 4294967296
  }
}

/**
 * Standard normals by Box–Muller, using both values of each pair (half the work per draw);
 * `1 - u` keeps the log argument away from 0.
 */
export const makeNormal = (rng: () => number): (() => number) => {
  let spare = NaN
  return () => {
    if (!Number.isNaN(spare)) {
      const z = spare
      spare = NaN
      return z
    }
    const r = Math.sqrt(-2 * Math.log(1 - rng())), a = 2 * Math.PI * rng()
    spare = r * Math.sin(a)
    return r * Math.cos(a)
  }
}

/** Standard normal CDF (Abramowitz–Stegun 7.1.26, |error| < 1.5e-7): maps a normal draw to a quantile. */
export const normalCdf = (z: number): number => {
  const x = Math.abs(z) / Math.SQRT2
  const t = 1 / (1 + 0.3275911 * x)
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-x * x)
  return z >= 0 ? 0.5 * (1 + y) : 0.5 * (1 - y)
}
