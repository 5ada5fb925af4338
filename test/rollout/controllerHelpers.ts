/**
 * Shared parts of the controller tests: the fixture harness/verifier, and a layer with an in-process actor system,
 * a local launcher actor and the controller.
 */
import { SqliteStore } from "@reins/gateway"
import { HarnessSpec, Task, VerifierSpec } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Layer } from "effect"
import { fileURLToPath } from "node:url"
import { storeLedgerLayer } from "reins"
import {
  type ControllerConfig,
  launcherActorLayer as launcherLayer,
  RolloutController,
} from "@reins/rollout/controller"

export const controllerFixture = (name: string) => fileURLToPath(new URL(`./controller-fixtures/${name}`, import.meta.url))

// Niceness 0, not the launcher's default 19 (as in helpers.ts): beside busy processes a nice-19
// harness can wait past its 20 s timeout for its first slices (seen with two busy loops running).
export const harnessSpec = (fields: Partial<ConstructorParameters<typeof HarnessSpec>[0]> = {}) =>
  new HarnessSpec({
    command: [process.execPath, controllerFixture("harness.mjs")],
    timeout_s: 20,
    grace_s: 1,
    nice: 0,
    verifier: new VerifierSpec({ command: [process.execPath, controllerFixture("verifier.mjs")], timeout_s: 10, nice: 0 }),
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

/** In one process: actor system, a local launcher actor (`maxConcurrent`) and the SQLite store as the ledger. */
export const launcherAndStore = (options: { readonly dir: string; readonly maxConcurrent?: number }) =>
  Layer.mergeAll(
    launcherLayer({ kind: "local", dataDir: `${options.dir}/launcher` }, { maxConcurrent: options.maxConcurrent ?? 4 }),
    storeLedgerLayer
  ).pipe(Layer.provideMerge(Layer.merge(ActorSystem.layerLocal(), SqliteStore.layer({ filename: `${options.dir}/store.db` }))))

/** `launcherAndStore` plus the controller. */
export const localLayers = (options: { readonly dir: string; readonly maxConcurrent?: number; readonly config?: Partial<ControllerConfig> }) =>
  RolloutController.layer(baseConfig(options.config)).pipe(Layer.provideMerge(launcherAndStore(options)))
