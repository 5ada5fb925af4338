/**
 * What the engine needs from a model: a KV cache per sequence and one batched forward call over
 * chunks of new tokens, returning the logits of each chunk's last token. Two implement it:
 * `FastEngineDecoder` (model/fastDecode.ts: typed arrays and wasm kernels, for the CPU backends)
 * and `DeviceEngineDecoder` over a `DeviceDecoder`, which keeps weights and caches on a GPU and
 * reads asynchronously (model/webgpuDecode.ts: its own shaders, on WebGPU; tests plug in a
 * reference of plain tfjs ops, test/policy/reference/tensorDecoder.ts).
 */
import type { ModelConfig } from "../model/config.js"
import { DecodeWeights, FastDecoder, type KvCache } from "../model/fastDecode.js"
import type { KvRows, TensorChunk, TensorKvCache } from "../model/kvRows.js"
import type { Pick, StepRows } from "../model/deviceDraw.js"
import { Transformer } from "../model/transformer.js"
import type { Weights } from "../model/weights.js"

/**
 * A draw a decoder may make on its device instead of returning a row of logits (for a request
 * without top-k, top-p or top logprobs; model/deviceDraw.ts), and a step's result per chunk:
 * its last token's logits, or the token drawn and its logprob.
 */
export type { Pick, StepRow, StepRows } from "../model/deviceDraw.js"

/** Rows [n, V] of `logits` as views. */
export const rowsOf = (logits: Float32Array, n: number, vocab: number): StepRows => Array.from({ length: n }, (_, i) => logits.subarray(i * vocab, (i + 1) * vocab))

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
  /** True when `forward` draws tokens itself for the chunks given a pick. */
  readonly drawsOnDevice?: boolean
  /** A cache for `capacity` tokens, or undefined while the live caches leave no room for it. */
  tryNewCache(capacity: number): C | undefined
  /** Drops a cache's contents (its memory may be reused by `tryNewCache`). */
  releaseCache(cache: C): void
  /**
   * Appends each chunk's ids to its cache; for each chunk, the logits of its last id (valid until
   * the next call), or — where `picks[i]` is given and the decoder samples on its device — the
   * token it drew with that pick. A decoder on a GPU answers with a promise: its work is queued
   * when the call returns, and the rows come once the device has read them back.
   */
  forward(chunks: ReadonlyArray<{ readonly cache: C; readonly ids: Int32Array }>, picks?: ReadonlyArray<Pick | undefined>): StepRows | Promise<StepRows>
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

  forward(chunks: ReadonlyArray<{ readonly cache: KvCache; readonly ids: Int32Array }>): StepRows {
    return rowsOf(this.decoder.forward(chunks, "last", true), chunks.length, this.config.vocabSize)
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

/**
 * A decoder that keeps its weights and KV caches on a device: `forward` queues a step's work and
 * resolves with its one read back, so the caller may change caches or weights while it is
 * pending; `setWeights` takes a model (`fromModel`: its current variables, merged with its
 * adapters) or plain weights.
 */
export interface DeviceDecoder {
  readonly config: ModelConfig
  readonly version: number
  readonly kv: KvRows
  forward(chunks: ReadonlyArray<TensorChunk>, picks?: ReadonlyArray<Pick | undefined>): Promise<StepRows>
  setWeights(source: WeightSource, version: number, fromModel: boolean): void
  dispose(): void
}

/** The engine's decoder on a GPU: weights and caches on the device, one asynchronous read per step. */
export class DeviceEngineDecoder implements Decoder<TensorKvCache> {
  readonly drawsOnDevice = true

  constructor(private readonly decoder: DeviceDecoder) {}

  get config(): ModelConfig {
    return this.decoder.config
  }

  get version(): number {
    return this.decoder.version
  }

  get maxCacheTokens(): number {
    return this.decoder.kv.maxCacheTokens
  }

  tryNewCache(capacity: number): TensorKvCache | undefined {
    return this.decoder.kv.tryNewCache(capacity)
  }

  releaseCache(cache: TensorKvCache): void {
    this.decoder.kv.releaseCache(cache)
  }

  forward(chunks: ReadonlyArray<{ readonly cache: TensorKvCache; readonly ids: Int32Array }>, picks?: ReadonlyArray<Pick | undefined>): Promise<StepRows> {
    return this.decoder.forward(chunks, picks)
  }

  setWeights(source: WeightSource, version: number): void {
    this.decoder.setWeights(source, version, source instanceof Transformer)
  }

  dispose(): void {
    this.decoder.dispose()
  }
}
