/**
 * Validation against measured small runs: simulate the configuration the real benchmark ran
 * (same profile, devices, batch, staleness) and report the relative error per mode.
 *
 * Expected measured file (bench/results/sync-vs-async.json, written by bench/sync-vs-async.ts):
 * ```jsonc
 * {
 *   "profile": WorkloadProfile,             // see profile.ts; measured in the same run
 *   "config": { "n": 4, "batch_groups": 4, "async_groups": 8, "max_staleness": 1, "tail": 1,
 *               "updates": 8, "warmup_updates": 0,  // the updates its wall time covers
 *               "sim_tail": 1 },  // optional: tail to simulate when the profile already holds the run's tail
 *   "modes": {                              // any subset; keys are the simulation's schedule names
 *     "sync":                 { "rollouts_per_s": 0.9, "devices": 1 },   // also accepted:
 *     "collocated-drain":     { ... },     //   "collocated_drain", "rollouts_trained_per_s",
 *     "collocated-interrupt": { ... },     //   config fields inside the mode entry
 *     "split":                { ... , "devices": 2 }
 *   }
 * }
 * ```
 * Anything missing is reported as a reason, not guessed.
 */
import { parseProfile, type WorkloadProfile } from "./profile.js"
import { type Schedule, schedules, simulate, type SimConfig } from "./schedules.js"

export interface ModeValidation {
  readonly schedule: Schedule
  readonly devices: number
  readonly measured_rollouts_per_s: number
  readonly predicted_rollouts_per_s: number
  /** (predicted − measured) / measured */
  readonly relative_error: number
}

export type Validation =
  | { readonly status: "ok"; readonly source: string; readonly modes: ReadonlyArray<ModeValidation>; readonly mean_abs_error: number }
  | { readonly status: "skipped"; readonly reason: string }

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x)
const numOr = (o: Record<string, unknown>, keys: ReadonlyArray<string>, fallback: number | undefined): number | undefined => {
  for (const k of keys) if (typeof o[k] === "number" && Number.isFinite(o[k])) return o[k] as number
  return fallback
}

/** Defaults for config fields a measured file leaves out (those of the sweep). */
export interface ValidationDefaults {
  readonly n: number
  readonly batch_groups: number
  readonly async_groups: number
  readonly max_staleness: number
  readonly seed: number
  readonly split_train_fraction: number
  /** Measure over the same updates the real run did: `warmup_updates: 0` when its wall time starts at launch. */
  readonly updates: number
  readonly warmup_updates: number
}

/** Validates the simulation against a parsed measured file; never throws on a bad file, says why it skipped. */
export const validateAgainst = (measured: unknown, defaults: ValidationDefaults, source: string): Validation => {
  if (!isObj(measured)) return { status: "skipped", reason: `${source}: not a JSON object` }
  let profile: WorkloadProfile
  try {
    profile = parseProfile(measured.profile)
  } catch (e) {
    return { status: "skipped", reason: `${source}: no usable "profile" (${e instanceof Error ? e.message : String(e)})` }
  }
  const config = isObj(measured.config) ? measured.config : {}
  const modesIn = isObj(measured.modes) ? measured.modes : measured
  const out: Array<ModeValidation> = []
  for (const schedule of schedules) {
    const entry = modesIn[schedule] ?? modesIn[schedule.replace("-", "_")]
    if (!isObj(entry)) continue
    const rate = numOr(entry, ["rollouts_per_s", "rollouts_trained_per_s"], undefined)
    if (rate === undefined || rate <= 0) continue
    const pick = (k: keyof ValidationDefaults) => numOr(entry, [k], numOr(config, [k], defaults[k]))!
    const cfg: SimConfig = {
      schedule,
      devices: numOr(entry, ["devices"], schedule === "split" ? 2 : 1)!,
      n: pick("n"),
      batch_groups: pick("batch_groups"),
      async_groups: pick("async_groups"),
      max_staleness: pick("max_staleness"),
      updates: pick("updates"),
      warmup_updates: pick("warmup_updates"),
      // `sim_tail`: the tail to simulate on top of the profile (1 when the profile was measured
      // with the run's own tail already in it); else `tail`.
      tail: numOr(entry, ["sim_tail", "tail"], numOr(config, ["sim_tail", "tail"], 1))!,
      seed: defaults.seed,
      split_train_fraction: pick("split_train_fraction")
    }
    const predicted = simulate(profile, cfg).rollouts_per_s
    out.push({ schedule, devices: cfg.devices, measured_rollouts_per_s: rate, predicted_rollouts_per_s: predicted, relative_error: (predicted - rate) / rate })
  }
  if (out.length === 0) return { status: "skipped", reason: `${source}: no mode entry with rollouts_per_s` }
  return { status: "ok", source, modes: out, mean_abs_error: out.reduce((s, m) => s + Math.abs(m.relative_error), 0) / out.length }
}
