/**
 * The task queue: hands out GRPO groups (`groupSize` rollouts of one task) in a seeded shuffled
 * order, epoch after epoch. The order is a pure function of (seed, epoch), so a run is
 * reproducible and a restarted controller resumes exactly where it stopped by passing back the
 * `position` it saved.
 *
 * Splits: `train` takes tasks with `split: "train"` or no split; `test` only `split: "test"`;
 * `all` takes every task.
 */
import { seededRandom, shuffleInPlace } from "@reins/protocol"
import { Effect, Option, Ref } from "effect"
import { TaskQueueError } from "../errors.js"
import type { TaskRecord } from "./taskSet.js"

export type SplitFilter = "train" | "test" | "all"

export interface TaskQueueOptions {
  readonly tasks: ReadonlyArray<TaskRecord>
  /** Rollouts per group (GRPO's n). */
  readonly groupSize: number
  readonly seed: number
  readonly split?: SplitFilter
  /** Passes over the tasks; default: unbounded. */
  readonly epochs?: number
  /** false keeps file order (evaluation runs). */
  readonly shuffle?: boolean
  /** Resume from a saved position. */
  readonly start?: QueuePosition
}

/** Where the queue stands: the next group is `order(epoch)[offset]`. */
export interface QueuePosition {
  readonly epoch: number
  readonly offset: number
}

export interface TaskGroup {
  /** Unique within the run: the task id and the epoch. */
  readonly groupId: string
  readonly record: TaskRecord
  readonly size: number
  readonly epoch: number
  /** Position within the epoch (0-based). */
  readonly offset: number
}

export interface TaskQueue {
  /** The next group, or none when every epoch is done. */
  readonly next: Effect.Effect<Option.Option<TaskGroup>>
  /** Up to `n` groups at once. */
  readonly take: (n: number) => Effect.Effect<ReadonlyArray<TaskGroup>>
  readonly position: Effect.Effect<QueuePosition>
  /** Tasks in the selected split. */
  readonly size: number
}

export const inSplit = (record: TaskRecord, split: SplitFilter): boolean =>
  split === "all" || (record.task.split ?? "train") === split

/** Mixes seed and epoch so that every epoch gets an independent permutation. */
const epochSeed = (seed: number, epoch: number) => (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(epoch + 1, 0xc2b2ae35)) >>> 0

/** The permutation of `0..n-1` used in `epoch` (Fisher–Yates). */
export const epochOrder = (n: number, seed: number, epoch: number): ReadonlyArray<number> =>
  shuffleInPlace(Array.from({ length: n }, (_, i) => i), seededRandom(epochSeed(seed, epoch)))

export const makeTaskQueue = (options: TaskQueueOptions): Effect.Effect<TaskQueue, TaskQueueError> =>
  Effect.gen(function*() {
    const split = options.split ?? "train"
    const tasks = options.tasks.filter((r) => inSplit(r, split))
    const epochs = options.epochs ?? Infinity
    if (!Number.isInteger(options.groupSize) || options.groupSize < 1) {
      return yield* new TaskQueueError({ message: `groupSize must be a positive integer, got ${options.groupSize}` })
    }
    if (!(epochs > 0)) return yield* new TaskQueueError({ message: `epochs must be positive, got ${epochs}` })
    if (tasks.length === 0) {
      return yield* new TaskQueueError({ message: `no task in split "${split}" (of ${options.tasks.length} tasks)` })
    }
    const orderOf = (epoch: number) => (options.shuffle === false ? null : epochOrder(tasks.length, options.seed, epoch))
    const start = options.start ?? { epoch: 0, offset: 0 }
    interface State {
      readonly epoch: number
      readonly offset: number
      readonly order: ReadonlyArray<number> | null
    }
    const state = yield* Ref.make<State>({ ...start, order: orderOf(start.epoch) })

    const next: Effect.Effect<Option.Option<TaskGroup>> = Ref.modify(state, (s): [Option.Option<TaskGroup>, State] => {
      // Normalize first: a saved offset at the end of an epoch means "start of the next one".
      let cur = s
      if (cur.offset >= tasks.length) cur = { epoch: cur.epoch + 1, offset: 0, order: orderOf(cur.epoch + 1) }
      if (cur.epoch >= epochs) return [Option.none(), cur]
      const record = tasks[cur.order === null ? cur.offset : cur.order[cur.offset]!]!
      const group: TaskGroup = { groupId: `${record.task.id}@${cur.epoch}`, record, size: options.groupSize, epoch: cur.epoch, offset: cur.offset }
      return [Option.some(group), { ...cur, offset: cur.offset + 1 }]
    })

    const take = (n: number) =>
      Effect.gen(function*() {
        const out: Array<TaskGroup> = []
        for (let i = 0; i < n; i++) {
          const g = yield* next
          if (Option.isNone(g)) break
          out.push(g.value)
        }
        return out
      })

    return {
      next,
      take,
      position: Ref.get(state).pipe(Effect.map(({ epoch, offset }) => ({ epoch, offset }))),
      size: tasks.length
    }
  })
