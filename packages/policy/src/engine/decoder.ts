/**
 * What the engine needs from a model: a KV cache per sequence and one batched forward call over
 * chunks of new tokens, returning the logits of each chunk's last token. It is implemented by
 * `FastDecoder` (model/fastDecode.ts); tests plug in a reference decoder of their own.
 */
import type { ModelConfig } from "../model/config.js"
import { DecodeWeights, FastDecoder, type KvCache } from "../model/fastDecode.js"
import { Transformer, type Weights } from "../model/transformer.js"

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
  /** The most tokens one cache can hold (prompt and output together). */
  readonly maxCacheTokens: number
  /** A cache for `capacity` tokens, or undefined while the live caches leave no room for it. */
  tryNewCache(capacity: number): C | undefined
  /** Drops a cache's contents (its memory may be reused by `tryNewCache`). */
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

  constructor(model: Transformer, version = model.version, options: { readonly kvBytes?: number } = {}) {
    this.weights = DecodeWeights.fromModel(model, { version })
    this.decoder = new FastDecoder(this.weights, options)
  }

  get config(): ModelConfig {
    return this.weights.config
  }

  get version(): number {
    return this.weights.version
  }

  get maxCacheTokens(): number {
    return this.decoder.maxCacheTokens
  }

  tryNewCache(capacity: number): KvCache | undefined {
    return this.decoder.tryNewCache(capacity)
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
    this.decoder.dispose()
  }
}
