/**
 * The policy the engine-path tests serve, all real parts: a byte-level BPE tokenizer trained on
 * a small corpus here, the default chat template, a tiny freshly initialised transformer and the
 * policy's generation engine. An untrained model samples noise, so tests that need the model to
 * *behave* (call a tool, then answer) first teach it their conversations: a few hundred SFT
 * steps of the real training code until greedy decoding reproduces every reply exactly.
 */
import { EngineGenerator, Gateway, Generator, type PromptFormat } from "@reins/gateway"
import {
  AdamW,
  ChatTemplate,
  type GenerationEngine,
  initBackend,
  initWeights,
  makeConfig,
  makeEngine,
  packSequences,
  parseToolCalls,
  type Tokenizer,
  trainBpe,
  scoreSequences,
  trainStep,
  Transformer,
  type Weights
} from "@reins/policy"
import { type ChatMessage, type ChatTool, GenerateRequest, SamplingParams } from "@reins/protocol"
import { Chunk, Effect, Exit, Layer, Scope, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import { type Running, startGateway } from "./harness.js"

/** One reply the model must learn: after `add` is appended to the conversation, it answers `reply`. */
export interface Step {
  readonly add: ReadonlyArray<ChatMessage>
  /** The model's text (tool calls as `<tool_call>…</tool_call>`). */
  readonly reply: string
}

export interface Conversation {
  readonly tools?: ReadonlyArray<ChatTool>
  readonly steps: ReadonlyArray<Step>
}

/** The id the tiny policy is served under. */
export const MODEL_ID = "tiny-policy"

export interface TinyPolicy {
  readonly modelId: string
  readonly format: PromptFormat
  readonly tokenizer: Tokenizer
  readonly engine: GenerationEngine
  readonly model: Transformer
  readonly backend: Layer.Layer<Gateway.GatewayBackend>
  /** The same engine behind another chat template. */
  readonly backendWith: (template: ChatTemplate) => Layer.Layer<Gateway.GatewayBackend>
  /**
   * A real weight update: fresh weights (another seed's initialisation) served as the next
   * version, in the model and the engine. Returns the version.
   */
  readonly updateWeights: () => Promise<number>
  /** Per-token logprobs (temperature 1, aligned with the tokens) of `sequences` under the weights `version` served. */
  readonly score: (version: number, sequences: ReadonlyArray<Int32Array>) => Promise<Array<Float32Array>>
  readonly close: () => Promise<void>
}

const BASE_CORPUS = [
  "The weather in Paris is sunny. The weather in London is rainy. It is sunny in Paris. It is rainy in London.",
  "Hello there, I am fine. How are you? Thanks! Great, thank you. What is the weather?",
  "You are a helpful assistant. You are a weather bot. You are brief.",
  "0123456789 {}[]:,\" abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
].join("\n")

/** A training example: exact prompt ids (as the Gateway will build them) and the reply ids. */
interface Example {
  readonly prompt: Int32Array
  readonly output: Int32Array
}

/** The exact prompt of every step, built the way the Gateway builds them (reusing earlier ids). */
const examplesOf = (tokenizer: Tokenizer, template: ChatTemplate, conversation: Conversation): Array<Example> => {
  const options = { tools: conversation.tools, addGenerationPrompt: true }
  const messages: Array<ChatMessage> = []
  const examples: Array<Example> = []
  let previous: { readonly promptIds: Int32Array; readonly outputIds: Int32Array } | null = null
  let start = 0
  conversation.steps.forEach((step, n) => {
    messages.push(...step.add)
    const prompt = previous === null ? template.encode(tokenizer, messages, options) : template.continuePrompt(tokenizer, previous, messages, start, options)
    const output = Int32Array.from([...tokenizer.encode(step.reply, { allowSpecial: true }), tokenizer.eosId])
    examples.push({ prompt, output })
    const parsed = parseToolCalls(step.reply, { makeId: (i) => `call_${n}_${i}` })
    messages.push({
      role: "assistant",
      content: parsed.content === "" && parsed.toolCalls.length > 0 ? null : parsed.content,
      ...(parsed.toolCalls.length > 0
        ? { tool_calls: parsed.toolCalls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) }
        : {})
    })
    previous = { promptIds: prompt, outputIds: output }
    start = messages.length
  })
  return examples
}

const greedy = (maxTokens: number) => new SamplingParams({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0 })

const same = (a: ArrayLike<number>, b: ArrayLike<number>) => a.length === b.length && Array.from(a).every((v, i) => v === b[i])

/**
 * One training sequence per conversation: its last prompt and reply, trained on every reply in
 * it — each step's prompt is an exact prefix of the next one's (the chain the Gateway builds).
 */
const sequenceOf = (steps: ReadonlyArray<Example>) => {
  const last = steps[steps.length - 1]!
  const tokens = Int32Array.from([...last.prompt, ...last.output])
  const weights = new Float32Array(tokens.length)
  for (const step of steps) {
    if (!same(tokens.subarray(0, step.prompt.length + step.output.length), [...step.prompt, ...step.output])) throw new Error("the steps do not form one token chain")
    weights.fill(1, step.prompt.length, step.prompt.length + step.output.length)
  }
  return { tokens, weights }
}

/** SFT until greedy decoding reproduces every example (bounded; fails loudly if it does not). */
const memorize = async (model: Transformer, engine: GenerationEngine, conversations: ReadonlyArray<ReadonlyArray<Example>>, maxSteps: number) => {
  const examples = conversations.flat()
  const sequences = conversations.map(sequenceOf)
  const batches = packSequences(sequences, { maxTokens: 4096, maxSeqLen: model.config.contextLength })
  const optimizer = new AdamW(model.params, { lr: 4e-3, maxGradNorm: 1 })
  const decode = (e: Example) =>
    Effect.runPromise(Stream.runCollect(engine.generate(new GenerateRequest({ requestId: crypto.randomUUID(), promptIds: e.prompt, params: greedy(e.output.length + 2) })))).then(
      (chunks) => Chunk.toReadonlyArray(chunks).flatMap((c) => Array.from(c.outputIds))
    )
  // All at once: the engine batches them.
  const reproduces = async () => (await Promise.all(examples.map(decode))).every((ids, i) => same(ids, examples[i]!.output))
  for (let step = 1; step <= maxSteps; step++) {
    const stats = await trainStep(model, optimizer, batches, { kind: "sft" })
    const perToken = stats.loss / Math.max(1, stats.tokens)
    if (step % 10 === 0 && perToken < 0.05) {
      await Effect.runPromise(engine.setWeights(model.version, model))
      if (await reproduces()) return step
    }
  }
  throw new Error(`the tiny model did not learn its ${examples.length} replies in ${maxSteps} steps`)
}

/**
 * A tiny policy on the real engine; `conversations` are taught to it first (if any).
 */
export const tinyPolicy = async (
  options: {
    readonly conversations?: ReadonlyArray<Conversation>
    readonly contextLength?: number
    readonly maxSteps?: number
    /** Ids that end a generation (default: the tokenizer's; `[]` makes every generation run to max_tokens). */
    readonly stopIds?: ReadonlyArray<number>
  } = {}
): Promise<TinyPolicy> => {
  const backend = await initBackend()
  const template = ChatTemplate.default()
  const conversations = options.conversations ?? []
  // Teach the tokenizer the rendered training conversations, so prompts stay short.
  const rendered = conversations.map((c) => template.render(c.steps.flatMap((s) => s.add), { tools: c.tools }))
  const tokenizer = trainBpe([BASE_CORPUS, ...rendered, ...conversations.flatMap((c) => c.steps.map((s) => s.reply))].join("\n").repeat(3), { vocabSize: 640 })
  const config = makeConfig({ vocabSize: tokenizer.vocabSize, dModel: 64, nLayers: 2, nHeads: 2, dFf: 128, contextLength: options.contextLength ?? 512 })
  const model = Transformer.init(config, 7)
  const scope = Effect.runSync(Scope.make())
  const engine = await Effect.runPromise(Scope.extend(makeEngine({ model, tokenizer, ...(options.stopIds ? { stopIds: options.stopIds } : {}) }), scope))
  const examples = conversations.map((c) => examplesOf(tokenizer, template, c))
  if (examples.length > 0) {
    await memorize(model, engine, examples, options.maxSteps ?? 600).catch(async (e) => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      throw e
    })
  }
  let version = model.version
  /** What each version served, to score what was sampled under it. */
  const served = new Map<number, Weights>([[version, model.readWeights()]])
  const generator = EngineGenerator.fromEngine(engine, { id: MODEL_ID, contextLength: config.contextLength, defaultMaxTokens: 64, backend })
  const format: PromptFormat = { tokenizer, template }
  return {
    modelId: MODEL_ID,
    format,
    tokenizer,
    engine,
    model,
    backend: Gateway.engineBackend(format).pipe(Layer.provide(Layer.succeed(Generator, generator))),
    backendWith: (other) => Gateway.engineBackend({ tokenizer, template: other }).pipe(Layer.provide(Layer.succeed(Generator, generator))),
    updateWeights: async () => {
      version += 1
      const weights = initWeights(config, 1_000 + version)
      model.setWeights(weights, version)
      await Effect.runPromise(engine.setWeights(version, model))
      served.set(version, weights)
      return version
    },
    score: async (v, sequences) => {
      const weights = served.get(v)
      if (weights === undefined) throw new Error(`no weights were served as version ${v}`)
      const scorer = Transformer.fromWeights(config, weights)
      try {
        return await scoreSequences(scorer, sequences.map((tokens) => ({ tokens, weights: new Float32Array(tokens.length) })), {
          maxTokens: 4096,
          maxSeqLen: config.contextLength
        })
      } finally {
        scorer.dispose()
      }
    },
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/**
 * For the tests of one file: before them, a tiny policy taught `options.conversations` and a
 * Gateway serving it (handed to `started`); after them, both closed, even when starting failed.
 */
export const serveTinyPolicy = (options: Parameters<typeof tinyPolicy>[0], started: (served: { readonly policy: TinyPolicy; readonly gw: Running }) => void) => {
  let policy: TinyPolicy | undefined
  let gw: Running | undefined
  beforeAll(async () => {
    policy = await tinyPolicy(options)
    gw = await startGateway(policy.backend)
    started({ policy, gw })
  }, 120_000)
  afterAll(async () => {
    await gw?.close()
    await policy?.close()
  })
}

/** The weather tool's two taught conversations (a Paris tool loop; a greeting), in chat form. */
export const WEATHER = {
  system: "You are a weather bot.",
  hello: "Hello there, I am fine.",
  paris: '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
  conversations: (tools: Conversation["tools"]): Array<Conversation> => [
    {
      tools,
      steps: [
        { add: [{ role: "system", content: WEATHER.system }, { role: "user", content: "What is the weather in Paris?" }], reply: WEATHER.paris },
        { add: [{ role: "tool", tool_call_id: "call_0_0", content: "sun, 25C" }], reply: "It is sunny in Paris." }
      ]
    },
    { steps: [{ add: [{ role: "user", content: "Hi!" }], reply: WEATHER.hello }] }
  ]
}
