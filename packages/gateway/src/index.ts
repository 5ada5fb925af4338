/**
 * @reins/gateway — the Gateway harnesses talk to as OpenAI (chat, Responses) or Anthropic
 * (Messages): attempt keys, exact-token recording, the pause gate, the store. See Gateway.ts for how the pieces are assembled.
 */
export * as Gateway from "./Gateway.js"
export { Generator, GenerateError, type GeneratorService, type ModelInfo } from "./generator/Generator.js"
export * as Upstream from "./generator/Upstream.js"
export * as EngineGenerator from "./generator/EngineGenerator.js"
export * as PauseGate from "./gate/PauseGate.js"
export * as Metrics from "./metrics.js"
/** The HTTP route table (method, path, metric name): what the Gateway serves. */
export { routes as httpRoutes } from "./http/router.js"
export { Store, type StoreService, type IssuedAttempt, type NewCall, type NewReward, type NewRollout, type RolloutDetail, type RolloutPage, type RolloutQuery, type RolloutSummary, type UnfinishedRollout } from "./store/Store.js"
export * as SqliteStore from "./store/sqlite/SqliteStore.js"
export type { PromptFormat } from "./prompt/reuse.js"
export { generateKey, hashKey } from "./auth/keys.js"
/** The dashboard's read of an attempt's captured logs: from the launcher in the cluster that ran it. */
export { attemptLogsFromCluster, type AttemptLogs } from "./dashboard/attemptLogs.js"
