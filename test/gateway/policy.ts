/**
 * The policy the engine-path tests serve: a tokenizer trained on a small corpus in the test, the
 * default chat template, and a generator. PLACEHOLDER until the policy engine lands: the
 * generator below is the dev one from /tmp and will be replaced by a tiny freshly initialised
 * model behind the real engine.
 */
import { Gateway, type PromptFormat } from "@reins/gateway"
import { ChatTemplate, trainBpe } from "@reins/policy"
import { Layer } from "effect"
import { devGenerator } from "./zz_devgen.js"

export const CORPUS = [
  "The weather in Paris is sunny. The weather in London is rainy.",
  'I will call a tool: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
  "system user assistant tool You are a helpful assistant. What is the weather? It is sunny.",
  "0123456789 {}[]:,\" abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
].join("\n").repeat(20)

export const makePolicy = (script: (prompt: string) => string, opts: { contextLength?: number } = {}) => {
  const tokenizer = trainBpe(CORPUS, { vocabSize: 400 })
  const template = ChatTemplate.default()
  const format: PromptFormat = { tokenizer, template }
  const dev = devGenerator(tokenizer, script, opts)
  const backend = Gateway.engineBackend(format).pipe(Layer.provide(dev.layer))
  return { format, backend, setVersion: dev.state.setVersion as (v: number) => void, modelId: "dev-model" }
}
