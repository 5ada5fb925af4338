/**
 * What the engine needs from a model: a KV cache per sequence and one batched forward call over
 * chunks of new tokens, returning the logits of each chunk's last token. Two implementations:
 * `FastDecoder` (model/fastDecode.ts, the default) and `TfDecoder`, the tfjs reference
 * (`Transformer.decode`, one sequence at a time), kept to measure against and to test with.
 */
import * as tf from "@tensorflow/tfjs"
import type { ModelConfig } from "../model/config.js"
import { DecodeWeights, FastDecoder, type KvCache } from "../model/fastDecode.js"
import { type TfKvCache, Transformer, type Weights } from "../model/transformer.js"

/** New weights for a decoder: a model (its current variables are read) or plain weights. */
export type WeightSource = Transformer | Weights

export interface DecoderCache {
  /** Tokens held. */
  readonly length: number
}

export interface Decoder<C extends DecoderCache = DecoderCache> {
  readonly config: ModelConfig
  /** The policy version of the weights in use. */
  readonly version: number
  newCache(capacity: number): C
  /** Drops a cache's contents (it may be reused by `newCache`). */
  releaseCache(cache: C): void
  /**
   * Appends each chunk's ids to its cache; logits of each chunk's last id, [chunks, vocab]
   * (valid until the next call).
   */
  forward(chunks: ReadonlyArray<{ readonly cache: C; readonly ids: Int32Array }>): Float32Array
  /** Takes new weights — a model's current variables, or plain weights — as version `version`. */
  setWeights(source: WeightSource, version: number): void
  dispose(): void
}

/** The engine's decoder: the typed-array decode path over a weight snapshot. */
export class FastEngineDecoder implements Decoder<KvCache> {
  private weights: DecodeWeights
  private readonly decoder: FastDecoder

  constructor(model: Transformer, version = model.version) {
    this.weights = DecodeWeights.fromModel(model, { version })
    this.decoder = new FastDecoder(this.weights)
  }

  get config(): ModelConfig {
    return this.weights.config
  }

  get version(): number {
    return this.weights.version
  }

  newCache(capacity: number): KvCache {
    return this.decoder.newCache(capacity)
  }

  releaseCache(cache: KvCache): void {
    this.decoder.freeCache(cache)
  }

  forward(chunks: ReadonlyArray<{ readonly cache: KvCache; readonly ids: Int32Array }>): Float32Array {
    return this.decoder.forward(chunks, "last", true)
  }

  setWeights(source: WeightSource, version: number): void {
    const old = this.weights
    this.weights = source instanceof Transformer ? DecodeWeights.fromModel(source, { version }) : DecodeWeights.fromWeights(this.weights.config, source, version)
    this.decoder.setWeights(this.weights)
    old.dispose()
  }

  dispose(): void {
    this.weights.dispose()
  }
}

/** The tfjs reference decoder: `Transformer.decode`, chunk by chunk (no batching). */
export class TfDecoder implements Decoder<TfKvCache> {
  constructor(
    private model: Transformer,
    private currentVersion = model.version
  ) {}

  get config(): ModelConfig {
    return this.model.config
  }

  get version(): number {
    return this.currentVersion
  }

  newCache(): TfKvCache {
    return this.model.newCache()
  }

  releaseCache(cache: TfKvCache): void {
    this.model.disposeCache(cache)
  }

  forward(chunks: ReadonlyArray<{ readonly cache: TfKvCache; readonly ids: Int32Array }>): Float32Array {
    const V = this.model.config.vocabSize
    const out = new Float32Array(chunks.length * V)
    chunks.forEach((ch, i) => {
      const logits = this.model.decode(ch.cache, ch.ids)
      const last = tf.tidy(() => tf.slice(logits, [ch.ids.length - 1, 0], [1, V]))
      out.set(last.dataSync() as Float32Array, i * V)
      tf.dispose([logits, last])
    })
    return out
  }

  /** The reference reads the live variables: training changes what it decodes with. */
  setWeights(source: WeightSource, version: number): void {
    if (source instanceof Transformer) this.model = source
    else this.model.setWeights(source)
    this.currentVersion = version
  }

  dispose(): void {}
}
