/**
 * The metrics of one version: what the batch was made of (from `buildBatch`), how stale its
 * tokens were, how long the Gateway was paused, and what the device spent its time on. The
 * schedules feed these in; `versionMetrics` assembles the line written to the metrics log.
 */
import { DeviceBusy, VersionMetrics } from "@reins/protocol"
import type { Batch } from "./batch.js"

export type DeviceState = "generating" | "training" | "idle"

/**
 * Time the device spent in each state since the last `take`. The caller passes the time (ms) of
 * every change, so the arithmetic is testable without a clock.
 */
export class DeviceClock {
  private spent: Record<DeviceState, number> = { generating: 0, training: 0, idle: 0 }
  private from: number

  constructor(
    now: number,
    private state: DeviceState = "idle"
  ) {
    this.from = now
  }

  get current(): DeviceState {
    return this.state
  }

  /** The device switches to `state` at `now`. */
  set(state: DeviceState, now: number): void {
    this.spent[this.state] += Math.max(0, now - this.from)
    this.state = state
    this.from = now
  }

  /** Fractions of the time since the last `take` (all idle when no time passed); starts a new period. */
  take(now: number): DeviceBusy {
    this.set(this.state, now)
    const { generating, training, idle } = this.spent
    const total = generating + training + idle
    this.spent = { generating: 0, training: 0, idle: 0 }
    return total === 0
      ? new DeviceBusy({ generating: 0, training: 0, idle: 1 })
      : new DeviceBusy({ generating: generating / total, training: training / total, idle: idle / total })
  }
}

export interface VersionInput extends Pick<VersionMetrics, "version" | "at" | "wallSeconds" | "staleness" | "pause" | "device"> {
  readonly batch: Batch
  /** What the update reported; non-finite values are recorded as null (JSON cannot hold them). */
  readonly train?: Readonly<Record<string, number>>
}

export const versionMetrics = (input: VersionInput): VersionMetrics =>
  new VersionMetrics({
    version: input.version,
    at: input.at,
    wallSeconds: input.wallSeconds,
    reward: input.batch.reward,
    used: input.batch.used,
    segmentStarts: input.batch.segmentStarts,
    drops: input.batch.drops.snapshot(),
    staleness: input.staleness,
    pause: input.pause,
    device: input.device,
    train: Object.fromEntries(Object.entries(input.train ?? {}).map(([k, v]) => [k, Number.isFinite(v) ? v : null]))
  })
