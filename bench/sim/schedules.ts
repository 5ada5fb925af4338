/**
 * The three schedules, driven over one simulated cluster:
 * - sync: start `batch_groups` groups, wait for all, train on every device, repeat;
 * - collocated (drain | interrupt): keep `async_groups` groups running; when `batch_groups`
 *   whole groups are finished, close the gate, either let in-flight generations finish (drain)
 *   or stop them at a token boundary (interrupt), train on the same devices, reopen;
 * - split: some devices only generate, the others only train; after each update the generation
 *   devices stop for a weight sync.
 * The staleness bound works as in the real Trainer, by admission AND a gate, never by discarding
 * (see gate.ts; `simulate` takes the real `StalenessGate` in its place too): a group starts only
 * within the admission budget, and an update waits while a group that would otherwise exceed the
 * bound is still running (generation goes on meanwhile). So no trained token is ever staler than
 * max_staleness.
 *
 * Throughput is measured between the end of update `warmup_updates` and the end of update
 * `warmup_updates + updates`, so the start-up (empty pipeline) doesn't count.
 */
import { Cluster, type Group, type Rollout } from "./cluster.js"
import { type GateFactory, type GateGroup, simGate } from "./gate.js"
import { EventQueue } from "./heap.js"
import { updateTime, type WorkloadProfile } from "./profile.js"
import { WorkloadSampler } from "./workload.js"

export const schedules = ["sync", "collocated-drain", "collocated-interrupt", "split"] as const
export type Schedule = (typeof schedules)[number]

export interface SimConfig {
  readonly schedule: Schedule
  /** Devices in total (split: generation + training). */
  readonly devices: number
  /** Rollouts per group (GRPO group size). */
  readonly n: number
  /** Whole groups per update: the batch is batch_groups × n rollouts. */
  readonly batch_groups: number
  /** Async schedules: groups kept running. Ignored by sync. */
  readonly async_groups: number
  readonly max_staleness: number
  /** Updates measured, after `warmup_updates` that are not. */
  readonly updates: number
  readonly warmup_updates: number
  readonly tail: number
  readonly seed: number
  /** Split: fraction of the devices that train (the rest generate). */
  readonly split_train_fraction: number
  /** Keep the admission and update trace (tests, timelines). */
  readonly trace?: boolean
}

export interface UpdateTrace {
  readonly version: number
  readonly start: number
  readonly end: number
  readonly rollouts: number
  readonly tokens: number
}

export interface SimResult {
  readonly schedule: Schedule
  readonly devices: number
  readonly generation_devices: number
  readonly training_devices: number
  readonly rollouts_per_s: number
  readonly rollouts_per_s_per_device: number
  readonly tokens_trained_per_s: number
  /** Fractions of device-time in the window (sum to 1). */
  readonly busy: { readonly generating: number; readonly training: number; readonly overhead: number; readonly idle: number }
  /** Mean sequences decoded together while a generation device was busy. */
  readonly mean_decode_concurrency: number
  /** Share of model calls held by a pause, and their mean added latency. */
  readonly held_call_fraction: number
  readonly held_mean_s: number
  /** Updates a trained rollout's start lagged behind: histogram and max. */
  readonly staleness: Readonly<Record<string, number>>
  readonly max_staleness_seen: number
  readonly window_s: number
  readonly rollouts_trained: number
  readonly events: number
  readonly trace?: {
    /** Every group admission: time, version then, rollouts and groups started including this group, groups consumed by updates then. */
    readonly admissions: ReadonlyArray<{ readonly t: number; readonly version: number; readonly started: number; readonly admitted: number; readonly consumed: number }>
    readonly updates: ReadonlyArray<UpdateTrace>
  }
}

export class ConfigError extends Error {
  readonly _tag = "ConfigError"
  constructor(reason: string) {
    super(`simulation config: ${reason}`)
    this.name = "ConfigError"
  }
}

const checkConfig = (c: SimConfig): void => {
  const int = (k: keyof SimConfig, min: number) => {
    const v = c[k]
    if (typeof v !== "number" || !Number.isInteger(v) || v < min) throw new ConfigError(`${k} must be an integer >= ${min}, got ${String(v)}`)
  }
  int("devices", c.schedule === "split" ? 2 : 1)
  int("n", 1)
  int("batch_groups", 1)
  int("max_staleness", 0)
  int("updates", 1)
  int("warmup_updates", 0)
  if (c.schedule !== "sync" && c.async_groups < c.batch_groups) throw new ConfigError(`async_groups (${c.async_groups}) must be >= batch_groups (${c.batch_groups}), or no update ever fills`)
  if (!(c.tail >= 1)) throw new ConfigError(`tail must be >= 1, got ${c.tail}`)
  if (!(c.split_train_fraction > 0 && c.split_train_fraction < 1)) throw new ConfigError(`split_train_fraction must be in (0, 1), got ${c.split_train_fraction}`)
}

/**
 * Simulates one configuration. Pure: the same profile and config give the same result. `makeGate`
 * makes the staleness gate (by default the simulator's own; the Trainer's fits).
 */
export const simulate = (profile: WorkloadProfile, c: SimConfig, makeGate: GateFactory = simGate): SimResult => {
  checkConfig(c)
  // As the Trainer's run loop: sync is the bound 0 (a version's groups, then wait for all).
  const gate = makeGate(c.batch_groups, c.schedule === "sync" ? 0 : c.max_staleness)
  const q = new EventQueue()
  const sampler = new WorkloadSampler(profile, c.tail, c.seed)
  const dev = profile.device
  const split = c.schedule === "split"
  const trainDevices = split ? Math.min(c.devices - 1, Math.max(1, Math.round(c.devices * c.split_train_fraction))) : c.devices
  const genDevices = split ? c.devices - trainDevices : c.devices

  let version = 0
  let started = 0
  let admittedGroups = 0
  let consumedGroups = 0
  const running = new Set<Group>() // groups started and not yet finished
  let nextRollout = 0
  let nextGroup = 0
  let ready: Array<Group> = [] // finished groups waiting for an update, in finish order
  // What the gate sees of every group started and not yet trained (made once per state change:
  // the gate is asked at every group's end, with thousands of groups running).
  const gateViews = new Map<Group, GateGroup>()
  const view = (g: Group, finished: boolean): GateGroup => ({ groupId: String(g.id), startVersion: g.startVersion, seq: g.id, finished })
  const admissions: Array<{ t: number; version: number; started: number; admitted: number; consumed: number }> = []
  const updates: Array<UpdateTrace> = []
  const staleness = new Map<number, number>()
  let overheadDeviceSeconds = 0
  let trainingDeviceSeconds = 0
  let windowStart: { t: number; generating: number; seqSeconds: number; overhead: number; training: number } | undefined
  let result: SimResult | undefined

  const onFinished = (r: Rollout) => {
    if (++r.group.finished < c.n) return
    running.delete(r.group)
    ready.push(r.group)
    gateViews.set(r.group, view(r.group, true))
    schedule.groupFinished()
  }
  const cluster = new Cluster(q, genDevices, dev.decode, onFinished)

  const startGroup = () => {
    const group: Group = { id: nextGroup++, rollouts: [], startVersion: version, finished: 0 }
    started += c.n
    admittedGroups++
    running.add(group)
    gateViews.set(group, view(group, false))
    if (c.trace === true) admissions.push({ t: q.now, version, started, admitted: admittedGroups, consumed: consumedGroups })
    for (const spec of sampler.group(c.n)) {
      const r: Rollout = { id: nextRollout++, spec, group, startVersion: version, device: cluster.pick(), startedAt: q.now, turn: 0, heldSince: 0, finishedAt: NaN }
      group.rollouts.push(r)
      cluster.start(r)
    }
  }

  /** Async admission: keep async_groups running within the staleness budget. */
  const admit = () => {
    while (running.size < c.async_groups && gate.admit(String(nextGroup), version)) startGroup()
  }

  const views = () => [...gateViews.values()]
  /** The gate: an update may start when no due group is still running and a batch is ready. */
  const batchReady = () => ready.length >= c.batch_groups && gate.select(views(), version) !== null

  type Taken = { tokens: number; rollouts: number; groups: number; ids: ReadonlyArray<string> }
  /** Takes the gate's batch off the ready queue; returns its trained tokens and records staleness. */
  const takeBatch = (): Taken => {
    let tokens = 0, rollouts = 0
    const ids = gate.select(views(), version)
    // Asked once batchReady said yes; since then groups can only have finished or been admitted
    // within the budget at the same version, which never turns a yes into a wait.
    if (ids === null) throw new Error(`the gate refused at version ${version} the batch it had offered`)
    const chosen = new Set(ids)
    const taken = ready.filter((g) => chosen.has(String(g.id)))
    ready = ready.filter((g) => !chosen.has(String(g.id)))
    for (const g of taken) {
      gateViews.delete(g)
      for (const r of g.rollouts) {
        tokens += r.spec.train_tokens
        rollouts++
        const s = version - r.startVersion
        if (updates.length >= c.warmup_updates) staleness.set(s, (staleness.get(s) ?? 0) + 1)
      }
    }
    return { tokens, rollouts, groups: taken.length, ids }
  }

  const snapshot = () => {
    let generating = 0, seqSeconds = 0
    for (const d of cluster.devices) {
      generating += d.generating
      seqSeconds += d.seqSeconds
    }
    return { t: q.now, generating, seqSeconds, overhead: overheadDeviceSeconds, training: trainingDeviceSeconds }
  }

  /** An update took effect: bump the version, and open or close the measuring window. */
  const updated = (start: number, batchInfo: Taken) => {
    updates.push({ version, start, end: q.now, tokens: batchInfo.tokens, rollouts: batchInfo.rollouts })
    // As in the real loop, a trained batch frees admission budget only when its update is done
    // (admissions during the update still see the old version).
    consumedGroups += batchInfo.groups
    gate.consume(batchInfo.ids)
    version++
    if (updates.length === c.warmup_updates) windowStart = snapshot()
    if (updates.length === c.warmup_updates + c.updates) {
      result = finish(windowStart ?? { t: 0, generating: 0, seqSeconds: 0, overhead: 0, training: 0 }, snapshot())
      q.stop()
    }
  }

  const finish = (a: ReturnType<typeof snapshot>, b: ReturnType<typeof snapshot>): SimResult => {
    const window = b.t - a.t
    const measured = updates.slice(c.warmup_updates)
    const rollouts = measured.reduce((s, u) => s + u.rollouts, 0)
    const tokens = measured.reduce((s, u) => s + u.tokens, 0)
    const deviceTime = window * c.devices
    const generating = (b.generating - a.generating) / deviceTime
    const training = (b.training - a.training) / deviceTime
    const overhead = (b.overhead - a.overhead) / deviceTime
    const hist: Record<string, number> = {}
    for (const [k, v] of [...staleness].sort((x, y) => x[0] - y[0])) hist[String(k)] = v
    return {
      schedule: c.schedule,
      devices: c.devices,
      generation_devices: genDevices,
      training_devices: trainDevices,
      rollouts_per_s: rollouts / window,
      rollouts_per_s_per_device: rollouts / window / c.devices,
      tokens_trained_per_s: tokens / window,
      busy: { generating, training, overhead, idle: Math.max(0, 1 - generating - training - overhead) },
      mean_decode_concurrency: b.generating > a.generating ? (b.seqSeconds - a.seqSeconds) / (b.generating - a.generating) : 0,
      held_call_fraction: cluster.calls > 0 ? cluster.heldCalls / cluster.calls : 0,
      held_mean_s: cluster.heldCalls > 0 ? cluster.heldSeconds / cluster.heldCalls : 0,
      staleness: hist,
      max_staleness_seen: Math.max(0, ...staleness.keys()),
      window_s: window,
      rollouts_trained: rollouts,
      events: q.events,
      ...(c.trace === true ? { trace: { admissions, updates } } : {})
    }
  }

  /** Trains one batch on `devices` training devices for the modelled time plus `extra` seconds. */
  const train = (devices: number, extra: number, then: (start: number, b: Taken) => void) => {
    const start = q.now
    const b = takeBatch()
    const t = updateTime(dev, b.tokens, devices)
    trainingDeviceSeconds += t * devices
    overheadDeviceSeconds += extra * devices
    q.after(t + extra, () => then(start, b))
  }

  const schedule = pickSchedule()
  schedule.begin()
  q.run(200_000_000)
  if (result === undefined) throw new Error(`simulation of ${c.schedule} ended before ${c.warmup_updates + c.updates} updates (no more events)`)
  return result

  function pickSchedule(): { begin: () => void; groupFinished: () => void } {
    switch (c.schedule) {
      case "sync": {
        const iteration = () => {
          for (let i = 0; i < c.batch_groups; i++) {
            if (!gate.admit(String(nextGroup), version)) throw new Error(`the gate refused a group of version ${version} in sync`)
            startGroup()
          }
        }
        return {
          begin: iteration,
          groupFinished: () => {
            if (!batchReady()) return
            train(c.devices, 0, (start, b) => {
              updated(start, b)
              iteration()
            })
          }
        }
      }
      case "collocated-drain":
      case "collocated-interrupt": {
        const interrupt = c.schedule === "collocated-interrupt"
        let updating = false
        const maybeUpdate = () => {
          if (updating || !batchReady()) return
          updating = true
          cluster.closeGate()
          const update = () =>
            train(c.devices, dev.pause_s, (start, b) => {
              updated(start, b)
              updating = false
              if (interrupt) cluster.unfreeze()
              cluster.openGate()
              admit()
              maybeUpdate()
            })
          // Interrupt: in-flight sequences stop where they are and continue after the update.
          if (interrupt) {
            cluster.freeze()
            update()
          } else cluster.whenDrained(update)
        }
        return {
          begin: admit,
          groupFinished: () => {
            maybeUpdate()
            admit()
          }
        }
      }
      case "split": {
        let training = false
        const maybeTrain = () => {
          if (training || !batchReady()) return
          training = true
          train(trainDevices, 0, (start, b) => {
            // Weight sync: generation stops mid-token for a brief swap, then continues.
            cluster.freeze()
            cluster.closeGate()
            overheadDeviceSeconds += dev.weight_sync_s * genDevices
            q.after(dev.weight_sync_s, () => {
              updated(start, b)
              training = false
              cluster.unfreeze()
              cluster.openGate()
              admit()
              maybeTrain()
            })
          })
        }
        return {
          begin: admit,
          groupFinished: () => {
            maybeTrain()
            admit()
          }
        }
      }
    }
  }
}
