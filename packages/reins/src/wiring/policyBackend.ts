/**
 * The Gateway's policy backend: it samples through the `device` actor (wherever it runs) and
 * reads the tokenizer and chat template from the model directory the device serves. Neither
 * module loaded here pulls in TensorFlow.js: the model lives in the device's worker thread.
 */
import type * as GatewayModule from "@reins/gateway"
import type { ActorSystem } from "@reins/runtime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

export type BackendLayer = Layer.Layer<GatewayModule.Gateway.GatewayBackend, unknown, ActorSystem>

/** Output parsers of a Hugging Face template, by vLLM's names (absent or "auto": detected from the template). */
export interface ParserSettings {
  readonly toolParser?: string | undefined
  readonly reasoningParser?: string | undefined
}

/** A Gateway backend over the device actor (start the device first, e.g. `deviceWorkerLayer`). */
export const policyBackend = (parsers: ParserSettings = {}): BackendLayer => Layer.unwrapEffect(
  Effect.gen(function*() {
    const { EngineGenerator, Gateway, Generator } = yield* Effect.promise(() => import("@reins/gateway"))
    const { deviceEngine } = yield* Effect.promise(() => import("@reins/policy/device"))
    const { loadPromptTemplate, loadTokenizer, OutputParsersConfig } = yield* Effect.promise(() => import("@reins/policy/text"))
    const engine = yield* deviceEngine
    const info = yield* engine.info
    const tokenizer = yield* loadTokenizer(info.modelDir)
    // reins's own template or the model's Hugging Face one (tokenizer_config.json / chat_template.jinja).
    const template = yield* loadPromptTemplate(info.modelDir, { parsers: yield* decodeParsers(OutputParsersConfig, parsers) })
    const generator = EngineGenerator.fromEngine(engine, {
      id: info.modelId,
      contextLength: info.contextLength,
      defaultMaxTokens: info.defaultMaxTokens,
      backend: info.backend
    })
    yield* Effect.logInfo(
      `policy ${info.modelId} runs on the ${info.backend} backend (${(info.memoryBytes / 1024 ** 3).toFixed(1)} GiB; training micro-batches of up to ${info.microBatchTokens} tokens)`
    )
    return Gateway.engineBackend({ tokenizer, template }).pipe(Layer.provide(Layer.succeed(Generator, generator)))
  })
)

/** The settings checked against the parsers that exist (an unknown name fails, listing them). */
const decodeParsers = <A, I>(schema: Schema.Schema<A, I>, parsers: ParserSettings) =>
  Schema.decodeUnknown(schema)(JSON.parse(JSON.stringify(parsers))).pipe(
    Effect.mapError((e) => new Error(`output parsers: ${e.message}`))
  )
