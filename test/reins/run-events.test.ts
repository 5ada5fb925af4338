/**
 * A run's Trainer updates and evaluations go into the Gateway's durable event log (a real SQLite
 * store), where the dashboard's Runs page reads them: `trainer.version` with the update's
 * metrics as published, `evaluation` with its pass@1; other Trainer events are not recorded.
 */
import { SqliteStore } from "@reins/gateway"
import { VersionMetrics } from "@reins/protocol"
import type { TrainerEvent } from "@reins/trainer"
import { recordEvaluation, recordTrainerEvents } from "reins"
import { Chunk, Effect, Schema, Stream } from "effect"
import { rmSync } from "node:fs"
import path from "node:path"
import { expect, it } from "vitest"
import { trainerMetrics } from "../gateway/dashboardRun.js"
import { tempDir } from "../gateway/harness.js"

const failures = { failedAttempts: 0, failedRollouts: 0, topReason: null }

it("records the Trainer's versions and the evaluations as events", async () => {
  const dir = tempDir("run-events")
  try {
    const events = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteStore.make(path.join(dir, "reins.db"))
          const one = trainerMetrics(1, 4096, 2)
          const two = trainerMetrics(2, 2048, 4)
          const published: ReadonlyArray<TrainerEvent> = [
            { _tag: "Version", metrics: one, rolloutIds: [], failures },
            { _tag: "Skipped", version: 2, groups: 1, reason: "zero variance", failures },
            { _tag: "Checkpoint", version: 1, dir },
            { _tag: "Version", metrics: two, rolloutIds: [], failures }
          ]
          yield* recordTrainerEvents(store, Stream.fromIterable(published))
          yield* recordEvaluation(store, "test", 2, { tasks: 50, passAt1: 0.83, greedyPassAt1: 0.9, rollouts: 200, harnessErrors: 0, seconds: 150 })
          const logged = yield* Stream.runCollect(Stream.take(store.events(0), 3))
          return { logged: Chunk.toReadonlyArray(logged), one, two }
        })
      )
    )
    expect(events.logged.map((e) => e.type)).toEqual(["trainer.version", "trainer.version", "evaluation"])
    expect(Schema.decodeUnknownSync(VersionMetrics)(events.logged[0]!.data)).toEqual(events.one)
    expect(Schema.decodeUnknownSync(VersionMetrics)(events.logged[1]!.data)).toEqual(events.two)
    expect(events.logged[2]!.data).toMatchObject({ split: "test", version: 2, passAt1: 0.83, greedyPassAt1: 0.9, tasks: 50 })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
