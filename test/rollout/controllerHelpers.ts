/**
 * Shared parts of the controller tests: the Gateway's real SQLite store as the controller's
 * `AttemptLedger`, the fixture harness/verifier, and a layer with an in-process actor system,
 * a local launcher actor and the controller.
 */
import { SqliteStore, Store, type StoreService } from "@reins/gateway"
import { HarnessSpec, Task, VerifierSpec } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Effect, Layer } from "effect"
import { fileURLToPath } from "node:url"
import {
  AttemptLedger,
  type AttemptLedgerService,
  type ControllerConfig,
  LedgerError,
  launcherActorLayer as launcherLayer,
  RolloutController,
} from "@reins/rollout/controller"

export const controllerFixture = (name: string) => fileURLToPath(new URL(`./controller-fixtures/${name}`, import.meta.url))

const ledgerError = (operation: string) => (e: { readonly message: string }) => new LedgerError({ operation, message: e.message })

const issued = (i: { readonly rollout: { readonly id: string }; readonly attempt: { readonly id: string; readonly index: number }; readonly key: string }) => ({
  rolloutId: i.rollout.id,
  attemptId: i.attempt.id,
  index: i.attempt.index,
  key: i.key
})

/** The Gateway store as the ledger (what the `reins` package wires in a deployment). */
export const storeLedger = (store: StoreService): AttemptLedgerService => ({
  createRollout: ({ task, group }) => store.createRollout({ task, group }).pipe(Effect.map(issued), Effect.mapError(ledgerError("createRollout"))),
  createAttempt: (rolloutId) => store.createAttempt(rolloutId).pipe(Effect.map(issued), Effect.mapError(ledgerError("createAttempt"))),
  start: (attemptId) =>
    store.transition(attemptId, "running").pipe(
      Effect.asVoid,
      // the Gateway starts a queued attempt on its first call
      Effect.catchTag("IllegalTransition", (e) => (e.from === "running" ? Effect.void : Effect.fail(e))),
      Effect.mapError(ledgerError("start"))
    ),
  finish: (attemptId, state, reason) =>
    store.transition(attemptId, state, reason).pipe(
      Effect.catchTag("IllegalTransition", (e) =>
        e.from === "queued"
          ? Effect.asVoid(Effect.zipRight(store.transition(attemptId, "running"), store.transition(attemptId, state, reason)))
          : Effect.void // already ended: leave it
      ),
      Effect.asVoid,
      Effect.mapError(ledgerError("finish"))
    ),
  recordReward: (attemptId, value, info) => store.addReward({ attemptId, value, info }).pipe(Effect.asVoid, Effect.mapError(ledgerError("recordReward"))),
  rewardOf: (rolloutId, attemptId) =>
    store.rollout(rolloutId).pipe(
      Effect.map((d) => d.rewards.filter((r) => r.attemptId === attemptId && r.callId === null).at(-1)?.value ?? null),
      Effect.mapError(ledgerError("rewardOf"))
    )
})

export const ledgerLayer = Layer.effect(AttemptLedger, Effect.map(Store, storeLedger))

export const harnessSpec = (fields: Partial<ConstructorParameters<typeof HarnessSpec>[0]> = {}) =>
  new HarnessSpec({
    command: [process.execPath, controllerFixture("harness.mjs")],
    timeout_s: 20,
    grace_s: 1,
    verifier: new VerifierSpec({ command: [process.execPath, controllerFixture("verifier.mjs")], timeout_s: 10 }),
    ...fields
  })

export const answerTask = (id: string, answer: string, sleepMs = 0) => new Task({ id, input: { mode: "answer", answer, sleepMs } })

export const baseConfig = (fields: Partial<ControllerConfig> = {}): ControllerConfig => ({
  harness: harnessSpec(),
  endpoints: { openaiBaseUrl: "http://127.0.0.1:9/v1" },
  maxAttempts: 3,
  retryBackoff: { initial: "50 millis", max: "200 millis" },
  rescanInterval: "200 millis",
  ...fields
})

/** In one process: actor system, a local launcher actor (`maxConcurrent`), the SQLite store, the controller. */
export const localLayers = (options: { readonly dir: string; readonly maxConcurrent?: number; readonly config?: Partial<ControllerConfig> }) => {
  const base = Layer.mergeAll(
    launcherLayer({ kind: "local", dataDir: `${options.dir}/launcher` }, { maxConcurrent: options.maxConcurrent ?? 4 }),
    ledgerLayer
  ).pipe(Layer.provideMerge(Layer.merge(ActorSystem.layerLocal(), SqliteStore.layer({ filename: `${options.dir}/store.db` }))))
  return RolloutController.layer(baseConfig(options.config)).pipe(Layer.provideMerge(base))
}
