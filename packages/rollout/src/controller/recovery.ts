/**
 * What a controller takes back: rollouts its predecessor left unfinished in the ledger (restart
 * recovery), what launchers report they adopted, and attempts handed over from a lost launcher
 * that another Kubernetes launcher is asked to take over (see "Restart recovery" in README.md).
 *
 * The controller records each rollout's task as a `RecordedTask`: enough to resume the rollout
 * after a restart (the Gateway shows it as the rollout's task).
 */
import { type AdoptedAttempts, HarnessSpec, type RolloutEnded, Task } from "@reins/protocol"
import { Deferred, Duration, Effect, Schedule, Schema } from "effect"
import type { Attempts } from "./attempts.js"
import type { ControllerContext } from "./context.js"
import type { Entry } from "./entries.js"
import type { LauncherSlot } from "./launcherPool.js"
import type { UnfinishedAttempt } from "./ledger.js"

export const RecordedTask = Schema.Struct({
  controller: Schema.String,
  id: Schema.String,
  input: Schema.Unknown,
  extra: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  /** The submission's own harness spec (encoded), when it overrode the controller's. */
  harness: Schema.optional(HarnessSpec)
})
export const encodeRecordedTask = Schema.encodeEither(RecordedTask)
const decodeRecordedTask = Schema.decodeUnknownEither(RecordedTask)

export const makeRecovery = (ctx: ControllerContext, attempts: Attempts) => {
  const { ledger, pool, scope, settings, table } = ctx

  /** Handles what a launcher adopted (`restart`: when discovered) or took over (`takeover`). */
  const reconcile = (slot: LauncherSlot, adopted: AdoptedAttempts, why: "restart" | "takeover"): Effect.Effect<void> =>
    Effect.gen(function*() {
      for (const id of adopted.gone) {
        const entry = table.recovering.get(id)
        if (entry === undefined) continue
        yield* attempts.failRecovered(
          entry,
          why === "restart"
            ? `the controller restarted; the attempt was running when launcher node ${slot.node} restarted; its processes were killed`
            : `its launcher went away and launcher node ${slot.node} found its Job gone`
        )
      }
      const current = new Set([...table.live].map((e) => e.attempt.attemptId))
      for (const id of adopted.following) {
        const entry = table.recovering.get(id)
        if (entry !== undefined) {
          yield* attempts.place(entry, slot)
        } else if (!current.has(id)) {
          yield* Effect.logWarning(`controller: launcher ${slot.name} follows attempt ${id}, which no rollout waits for; cancelling it`)
          const orphaned = slot.ref.Cancel({ attemptId: id, reason: "orphaned: its rollout ended or moved on to a new attempt" })
          yield* Effect.forkIn(orphaned.pipe(Effect.timeout("60 seconds"), Effect.ignore), scope)
        }
      }
    })

  /** Asks a Kubernetes launcher (the freest, not the lost one) to take over the handed attempts waiting for one. */
  const offerHandedOver = Effect.suspend(() => {
    const bySlot = new Map<LauncherSlot, Array<Entry>>()
    for (const entry of table.recovering.values()) {
      if (entry.handedFrom === null || entry.offering) continue
      const best = pool.freest((slot) => slot.kind === "kubernetes" && slot.name !== entry.handedFrom)
      if (best === null) continue
      entry.offering = true
      bySlot.set(best, [...(bySlot.get(best) ?? []), entry])
    }
    return Effect.forEach(
      [...bySlot],
      ([slot, handed]) =>
        slot.ref.TakeOver({ attempts: handed.map((e) => ({ attemptId: e.attempt.attemptId, namespace: e.harness.kubernetes!.namespace })) }).pipe(
          Effect.timeout("30 seconds"),
          Effect.flatMap((taken) => reconcile(slot, taken, "takeover")),
          Effect.catchAll((e) => Effect.logWarning(`controller: launcher ${slot.name} did not take over handed attempts: ${e.message}`)),
          Effect.ensuring(Effect.sync(() => handed.forEach((e) => void (e.offering = false)))),
          Effect.forkIn(scope)
        ),
      { discard: true }
    )
  })

  /** A rollout the previous controller left unfinished, as this controller's entry (null: not ours). */
  const resume = (u: UnfinishedAttempt) =>
    Effect.gen(function*() {
      const recorded = decodeRecordedTask(u.task)
      if (recorded._tag === "Left") {
        const owner = typeof u.task === "object" && u.task !== null ? (u.task as { controller?: unknown }).controller : undefined
        if (owner === settings.controllerId) yield* Effect.logWarning(`controller: rollout ${u.rolloutId} cannot be resumed, its recorded task is unreadable: ${recorded.left.message}`)
        return null
      }
      const r = recorded.right
      if (r.controller !== settings.controllerId) return null
      const groupId = u.group ?? `${r.id}#resumed-${u.rolloutId}`
      const entry = table.add({
        rolloutId: u.rolloutId,
        groupId,
        task: new Task({ id: r.id, input: r.input }),
        taskExtra: r.extra,
        harness: r.harness ?? settings.harness,
        attempt: { rolloutId: u.rolloutId, attemptId: u.attemptId, index: u.index, key: "" },
        ended: yield* Deferred.make<RolloutEnded>()
      }, "recovering")
      table.joinGroup(groupId, entry.rolloutId)
      return entry
    })

  /**
   * Resumes what the previous controller left (run once, at start); returns how many rollouts.
   * Every unfinished rollout the previous controller recorded waits (phase "recovering") for a
   * launcher to report it adopted the attempt; at the end of the recovery window the rest are
   * failed as `node-lost` and retried as new attempts.
   */
  const recover = Effect.gen(function*() {
    const left = yield* ledger.unfinished.pipe(
      Effect.retry(Schedule.exponential("200 millis").pipe(Schedule.intersect(Schedule.recurs(4)))),
      Effect.catchAll((e) => Effect.as(Effect.logError(`controller: cannot read unfinished attempts from the ledger (they stay as they are): ${e.message}`), []))
    )
    let resumed = 0
    for (const u of left) if ((yield* resume(u)) !== null) resumed++
    if (resumed === 0) return 0
    yield* Effect.logInfo(`controller: resuming ${resumed} rollout(s) left unfinished by a previous controller`)
    const message = `the controller restarted; no launcher adopted the attempt within ${Duration.format(settings.recoveryWindow)}`
    // (an entry that recovers again since, handed over from a lost launcher, has its own deadline)
    const failLeft = Effect.suspend(() =>
      Effect.forEach([...table.recovering.values()].filter((entry) => entry.recoveries === 0), (entry) => attempts.failRecovered(entry, message), { discard: true })
    )
    yield* Effect.forkIn(Effect.zipRight(Effect.sleep(settings.recoveryWindow), failLeft), scope)
    return resumed
  })

  return { recover, reconcile, offerHandedOver }
}
