/**
 * The sweep: every schedule at every device count and tail, with the batch scaled with the
 * devices (weak scaling: each device keeps the same share of groups), plus the two ratios the
 * issue sets goals for. Every configuration uses the same seed, so group k gets the same task
 * draw in every schedule (common random numbers: the differences are the schedules', not luck's).
 */
import type { WorkloadProfile } from "./profile.js"
import { type Schedule, schedules, simulate, type SimResult } from "./schedules.js"

export interface SweepOptions {
  readonly profile: WorkloadProfile
  /** Nominal device counts; split runs on max(2, D) devices. */
  readonly devices: ReadonlyArray<number>
  readonly tails: ReadonlyArray<number>
  /** Per device: rollouts per group, groups per update, groups kept running (async). */
  readonly n: number
  readonly batch_groups_per_device: number
  readonly async_groups_per_device: number
  readonly max_staleness: number
  readonly split_train_fraction: number
  readonly seed: number
  /** Rollouts to measure per configuration (fewer updates when the batch is large), before 2 warm-up updates. */
  readonly target_rollouts: number
}

export const defaultSweep = (profile: WorkloadProfile): SweepOptions => ({
  profile,
  devices: [1, 8, 32, 128, 512],
  tails: [1, 2, 4],
  n: 4,
  batch_groups_per_device: 4,
  async_groups_per_device: 8,
  max_staleness: 1,
  split_train_fraction: 0.5,
  seed: 1,
  target_rollouts: 1600
})

export interface SweepPoint extends SimResult {
  readonly tail: number
  /** The row's device count (split at 1 runs on 2). */
  readonly nominal_devices: number
  readonly batch: number
}

export interface Ratio {
  readonly tail: number
  readonly devices: number
  /** The better collocated variant at this point. */
  readonly collocated_variant: Schedule
  readonly collocated_vs_sync: number
  readonly collocated_vs_split_per_device: number
}

export const runSweep = (o: SweepOptions): { points: Array<SweepPoint>; ratios: Array<Ratio> } => {
  const points: Array<SweepPoint> = []
  const ratios: Array<Ratio> = []
  for (const tail of o.tails) {
    for (const D of o.devices) {
      const batchGroups = o.batch_groups_per_device * D
      const batch = batchGroups * o.n
      const at = new Map<Schedule, SweepPoint>()
      for (const schedule of schedules) {
        const r = simulate(o.profile, {
          schedule,
          devices: schedule === "split" ? Math.max(2, D) : D,
          n: o.n,
          batch_groups: batchGroups,
          async_groups: o.async_groups_per_device * D,
          max_staleness: o.max_staleness,
          updates: Math.min(30, Math.max(2, Math.ceil(o.target_rollouts / batch))),
          warmup_updates: 2,
          tail,
          seed: o.seed,
          split_train_fraction: o.split_train_fraction
        })
        const p = { ...r, tail, nominal_devices: D, batch }
        at.set(schedule, p)
        points.push(p)
      }
      const drain = at.get("collocated-drain")!, interrupt = at.get("collocated-interrupt")!
      const coll = interrupt.rollouts_per_s >= drain.rollouts_per_s ? interrupt : drain
      ratios.push({
        tail,
        devices: D,
        collocated_variant: coll.schedule,
        collocated_vs_sync: coll.rollouts_per_s / at.get("sync")!.rollouts_per_s,
        collocated_vs_split_per_device: coll.rollouts_per_s_per_device / at.get("split")!.rollouts_per_s_per_device
      })
    }
  }
  return { points, ratios }
}
