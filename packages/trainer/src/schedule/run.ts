/**
 * A training run: hands tasks to the Rollout Controller as GRPO groups, collects the groups as
 * their rollouts end (pushed by the controller), and updates the policy whenever the staleness
 * gate selects a batch. One loop serves the three schedules:
 *
 *   sync        `async_groups = batch_groups` and a staleness bound of 0: a version's groups are
 *               admitted together, the update waits for all of them, nothing runs during it.
 *   collocated  `async_groups` groups keep running; the update pauses the Gateway and runs on
 *               the generation device; unfinished rollouts carry over (their later tokens come
 *               from the new version).
 *   split       like collocated, but the update runs on a second device while generation goes
 *               on, and the new weights are swapped into the generation device after it.
 *
 * The loop owns all run state in one fiber; the controller's admission hook only reads it.
 * Every event says what failed in its batch (failures.ts); a run in which `max_infra_failures`
 * rollouts in a row failed for an infrastructure reason stops with an error naming the reason.
 */
import { type TrainerConfig, TrainerStatus, VersionMetrics } from "@reins/protocol"
import { Effect, FiberSet, Option, PubSub, Queue, Ref, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import path from "node:path"
import { openJsonl } from "../jsonl.js"
import { checkpointDir, Cursor, writeCursor } from "./checkpoints.js"
import { GroupFilter } from "./dynamicSampling.js"
import { type FailureSummary, InfraStreak, summarizeFailures } from "./failures.js"
import { type DeviceClockReading, type RolloutEnded, type TaskItem, TrainerError, trainerError, type TrainerPorts } from "./ports.js"
import { type GroupState, StalenessGate } from "./StalenessGate.js"
import { deviceBusy, runUpdate, updateMetrics } from "./update.js"

export interface RunOptions {
  readonly config: TrainerConfig
  readonly ports: TrainerPorts
  /** Where `metrics.jsonl` and `checkpoints/` go. */
  readonly runDir: string
  /** Resume from this checkpoint (the device was restored to its version by the caller). */
  readonly resume?: Cursor | undefined
  /** Every version's metrics, as they are written. */
  readonly events?: PubSub.PubSub<TrainerEvent> | undefined
  /** Kept up to date with where the run stands (the Trainer actor's `Status`). */
  readonly status?: Ref.Ref<TrainerStatus> | undefined
}

export type TrainerEvent =
  | { readonly _tag: "Version"; readonly metrics: VersionMetrics; readonly rolloutIds: ReadonlyArray<string>; readonly failures: FailureSummary }
  | { readonly _tag: "Skipped"; readonly version: number; readonly groups: number; readonly reason: string; readonly failures: FailureSummary }
  | { readonly _tag: "Checkpoint"; readonly version: number; readonly dir: string }

export interface RunSummary {
  readonly version: number
  readonly versions: number
  readonly consumedGroups: number
  readonly wallSeconds: number
  /** The checkpoint written at the end of the run. */
  readonly finalCheckpoint: string
}

interface GroupEntry {
  readonly task: TaskItem
  readonly seq: number
  rolloutIds: ReadonlyArray<string>
  ended: ReadonlyArray<RolloutEnded> | null
}

/** The loop's state. Only the loop fiber writes it. */
class RunState {
  version: number
  /** Updates made by the run (across restarts). */
  versions: number
  seq = 0
  tasksLeft = true
  readonly groups = new Map<string, GroupEntry>()
  readonly pending: Array<TaskItem>

  constructor(readonly gate: StalenessGate, resume: Cursor | undefined, servedVersion: number) {
    this.version = resume?.version ?? servedVersion
    this.versions = resume?.versions ?? 0
    this.pending = [...(resume?.pending ?? [])]
    if (resume !== undefined) gate.restore(resume.consumedGroups)
  }

  status(training: boolean, schedule: TrainerConfig["schedule"]): TrainerStatus {
    const running = this.unfinished
    return new TrainerStatus({
      training,
      schedule,
      version: this.version,
      versions: this.versions,
      running,
      finished: this.groups.size - running,
      consumed: this.gate.consumedGroups,
      budget: this.gate.budget
    })
  }

  get unfinished(): number {
    return [...this.groups.values()].filter((g) => g.ended === null).length
  }

  views(): ReadonlyArray<GroupState> {
    return [...this.groups].map(([groupId, g]) => ({
      groupId,
      seq: g.seq,
      finished: g.ended !== null,
      startVersion: this.gate.startVersion(groupId)
    }))
  }
}

/** Dynamic sampling gives up after this many batches' worth of groups in a row without a signal. */
const DYNAMIC_SAMPLING_LIMIT = 20

const scheduleShape = (config: TrainerConfig) =>
  config.schedule === "sync"
    ? { asyncGroups: config.batch_groups, maxStaleness: 0 }
    : { asyncGroups: Math.max(config.asyncGroups, config.batch_groups), maxStaleness: config.max_staleness }

export const runTraining = (options: RunOptions): Effect.Effect<RunSummary, TrainerError, Scope.Scope> =>
  Effect.gen(function*() {
    const { config, ports } = options
    const shape = scheduleShape(config)
    const info = yield* ports.generation.info
    // A run continues from whatever the device serves (a base policy, an earlier run's weights).
    const state = new RunState(new StalenessGate(config.batch_groups, shape.maxStaleness), options.resume, info.version)
    const finished = yield* Queue.unbounded<{ readonly groupId: string; readonly ended: ReadonlyArray<RolloutEnded> }>()
    const waiters = yield* FiberSet.make<void, TrainerError>()
    const metrics = yield* openJsonl(path.join(options.runDir, "metrics.jsonl"), VersionMetrics).pipe(
      Effect.mapError(trainerError("open metrics"))
    )
    const started = performance.now() - (options.resume?.wallSeconds ?? 0) * 1000
    // Group ids are unique per run incarnation: a resumed run must not reuse its predecessor's.
    const nonce = randomBytes(3).toString("hex")

    // Only the run's own groups count against the staleness budget (evaluations, leftovers of
    // another run and anything else submitted to the controller pass).
    yield* ports.controller.setAdmission((groupId) =>
      Effect.sync(() => !state.groups.has(groupId) || state.gate.admit(groupId, state.version))
    )
    yield* Effect.addFinalizer(() => ports.controller.setAdmission(null))

    const nextTask = Effect.gen(function*() {
      const resubmitted = state.pending.shift()
      if (resubmitted !== undefined) return Option.some(resubmitted)
      return yield* ports.tasks.next
    })

    /** Hands out groups until `async_groups` are running or the tasks run out. */
    const fill = Effect.gen(function*() {
      while (state.tasksLeft && state.unfinished < shape.asyncGroups && !reachedEnd()) {
        const task = yield* nextTask
        if (Option.isNone(task)) {
          state.tasksLeft = false
          break
        }
        const groupId = `${nonce}.${state.seq}.${task.value.task.id}`
        const entry: GroupEntry = { task: task.value, seq: state.seq++, rolloutIds: [], ended: null }
        // Known before the controller can ask to admit its first rollout.
        state.groups.set(groupId, entry)
        const submitted = yield* ports.controller.submit(task.value, config.group_size, groupId)
        entry.rolloutIds = submitted.rolloutIds
        yield* FiberSet.run(
          waiters,
          Effect.flatMap(ports.controller.awaitGroup(groupId), (ended) => finished.offer({ groupId, ended }))
        )
      }
    })

    const reachedEnd = () => config.max_versions !== undefined && state.versions >= config.max_versions
    /** Dynamic sampling: drops finished groups without a signal (null when off). */
    const filter = config.dynamic_sampling ? new GroupFilter(DYNAMIC_SAMPLING_LIMIT * config.batch_groups) : null

    let clock = yield* readClocks(ports)
    let lastAt = performance.now()

    const update = (groupIds: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const rolloutIds = groupIds.flatMap((id) => state.groups.get(id)!.rolloutIds)
        // (the gate selects finished groups only: each has ended)
        const ended = groupIds.flatMap((id) => state.groups.get(id)!.ended ?? [])
        const failures = summarizeFailures(ended)
        yield* checkServing(yield* readClocks(ports), state.version)
        const result = yield* runUpdate(ports, { config, contextLength: info.contextLength, version: state.version, ended })
        state.gate.consume(groupIds)
        for (const id of groupIds) state.groups.delete(id)
        if (result.outcome === null) {
          yield* publish(options, { _tag: "Skipped", version: state.version, groups: groupIds.length, reason: "no trainable samples", failures })
          return
        }
        // The run's own count, not the version the device reports: a restarted device would report
        // its base's next version, and the check below must see the difference.
        state.version++
        state.versions++
        const now = performance.now()
        const nextClock = yield* readClocks(ports)
        yield* checkServing(nextClock, state.version)
        const wall = (now - lastAt) / 1000
        const busy = deviceBusy(wall, { from: clock.generation, to: nextClock.generation }, clock.training === null ? null : { from: clock.training, to: nextClock.training! })
        clock = nextClock
        lastAt = now
        if (filter !== null) result.batch.drops.merge(filter.take())
        const line = updateMetrics({ ...result, outcome: result.outcome }, Date.now(), wall, busy)
        yield* metrics.append(line).pipe(Effect.mapError(trainerError("write metrics")))
        yield* publish(options, { _tag: "Version", metrics: line, rolloutIds, failures })
        if (config.checkpoint_every > 0 && state.versions % config.checkpoint_every === 0) yield* checkpoint()
      })

    const checkpoint = () =>
      Effect.gen(function*() {
        const root = path.join(options.runDir, "checkpoints")
        const dir = checkpointDir(root, state.version)
        yield* ports.training.save(dir)
        const pending = [...state.groups.values()].sort((a, b) => a.seq - b.seq).map((g) => g.task)
        yield* writeCursor(root, new Cursor({
          version: state.version,
          versions: state.versions,
          consumedGroups: state.gate.consumedGroups,
          tasks: yield* ports.tasks.position,
          pending: [...pending, ...state.pending],
          wallSeconds: (performance.now() - started) / 1000
        }))
        yield* publish(options, { _tag: "Checkpoint", version: state.version, dir })
        return dir
      })

    const report = (training: boolean) =>
      options.status === undefined ? Effect.void : Ref.set(options.status, state.status(training, config.schedule))
    yield* Effect.addFinalizer(() => report(false))

    const infra = new InfraStreak()
    yield* fill
    while (!reachedEnd()) {
      yield* report(true)
      const drained = !state.tasksLeft && state.unfinished === 0
      const batch = state.gate.select(state.views(), state.version, drained)
      if (batch !== null) {
        yield* update(batch)
        yield* fill
        yield* ports.controller.reconsider
        continue
      }
      if (state.groups.size === 0) break
      const done = yield* finished.take
      const entry = state.groups.get(done.groupId)
      if (entry !== undefined) entry.ended = done.ended
      infra.add(done.ended)
      if (infra.count >= config.max_infra_failures) {
        return yield* new TrainerError({ operation: "rollouts", message: infra.message(config.max_infra_failures) })
      }
      if (entry !== undefined && filter !== null && (yield* filter.drop(done.ended))) {
        state.gate.consume([done.groupId])
        state.groups.delete(done.groupId)
        yield* ports.controller.reconsider
      }
      yield* fill
    }
    yield* FiberSet.clear(waiters)
    // Only this run's rollouts: anything else the controller runs (an evaluation) is not ours.
    for (const g of state.groups.values()) {
      if (g.ended === null) yield* Effect.forEach(g.rolloutIds, (id) => ports.controller.cancel(id, "the training run ended"), { discard: true })
    }
    const finalCheckpoint = yield* checkpoint()
    return {
      version: state.version,
      versions: state.versions,
      consumedGroups: state.gate.consumedGroups,
      wallSeconds: (performance.now() - started) / 1000,
      finalCheckpoint
    }
  })

const readClocks = (ports: TrainerPorts) =>
  Effect.gen(function*() {
    const generation: DeviceClockReading = yield* ports.generation.info
    const training: DeviceClockReading | null = ports.training === ports.generation ? null : yield* ports.training.info
    return { generation, training }
  })

/**
 * Every device must serve the run's version. One that does not has restarted: a device worker
 * that died (out of memory, a crash in the backend) comes back with the weights of its model
 * directory — the base policy — and its optimizer state is gone, so training on would silently
 * continue from the base. The run stops instead; `--resume` continues from the newest checkpoint.
 */
const checkServing = (
  clocks: { readonly generation: DeviceClockReading; readonly training: DeviceClockReading | null },
  version: number
): Effect.Effect<void, TrainerError> => {
  const off = ([["generation", clocks.generation], ["training", clocks.training]] as const)
    .find(([, reading]) => reading !== null && reading.version !== version)
  if (off === undefined) return Effect.void
  return Effect.fail(new TrainerError({
    operation: "device version",
    message: `the ${off[0]} device serves version ${off[1]!.version} where the run is at version ${version}: ` +
      "it restarted (a device worker that dies comes back with its model directory's weights and no optimizer state), " +
      "so training on would continue from the wrong policy. The run stops; continue it from its newest checkpoint with --resume"
  }))
}

const publish = (options: RunOptions, event: TrainerEvent) =>
  options.events === undefined ? Effect.void : Effect.asVoid(PubSub.publish(options.events, event))
