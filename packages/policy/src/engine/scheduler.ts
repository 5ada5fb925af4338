/**
 * Continuous batching, as a state machine driven one step at a time (engine.ts runs the steps on
 * a fiber and turns the output into streams). A step is synchronous on the CPU's decoder; on a
 * GPU's it ends when the device's answer comes back (a promise), and only then are its tokens
 * sampled and emitted.
 *
 * A step: admit waiting requests (FIFO, up to `maxBatch` live sequences; not while draining or
 * interrupted), then one forward call over every live sequence — a new prompt (or the part of it
 * that fits the step's `prefillBudget`) or the last sampled token — then sample one token for
 * every sequence whose input is fully consumed (a decoder that draws on its device is handed the
 * request's uniform for it, see `pickFor`), emit it, and retire finished sequences.
 * Requests join and leave at step boundaries; since every row of the batch is computed
 * independently, a request gets the same tokens whether it runs alone or beside others.
 *
 * Pauses: `interrupt()` holds all live sequences at a token boundary and hands back their state;
 * `resume()` continues them. After `setWeights` every sequence's KV cache is stale: it is
 * recomputed (prompt + tokens so far) under the new weights before its next token, which then
 * carries the new version — the caller sees one uninterrupted stream. `drain()` stops admitting
 * and reports when no sequence is live.
 */
import type { FinishReason, SamplingParams } from "@reins/protocol"
import { Data } from "effect"
import { randomSeed, Rng } from "../random.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import type { Decoder, DecoderCache, Pick, StepRows, WeightSource } from "./decoder.js"
import { type Sampled, Sampler } from "./sampler.js"
import { allTokens, emptyChunk, flush, newSequence, record, type Sequence, type Sink } from "./sequence.js"
import { StopMatcher } from "./stops.js"

/** A request the engine cannot run (bad prompt, duplicate id, ...) or a failed forward pass. */
export class EngineError extends Data.TaggedError("EngineError")<{
  readonly requestId: string
  readonly message: string
  readonly cause?: unknown
}> {}

/** A live sequence's state, as handed back by `interrupt()`. */
export interface SequenceState {
  readonly requestId: string
  readonly promptIds: Int32Array
  readonly outputIds: Int32Array
  readonly versions: Int32Array
}

export interface SchedulerOptions<C extends DecoderCache> {
  readonly decoder: Decoder<C>
  /** Needed for stop strings. */
  readonly tokenizer?: Tokenizer
  /** Ids that end a generation (EOS, end of turn). */
  readonly stopIds: ReadonlyArray<number>
  /** Live sequences at most (default 32). */
  readonly maxBatch?: number
  /** Prompt tokens run per step at most, so decoding keeps flowing beside long prompts (default 512). */
  readonly prefillBudget?: number
  /**
   * A sequence's tokens are emitted together until this many milliseconds have passed since its
   * last chunk (default 0: every token is its own chunk). A few ms is invisible to a reader and
   * saves waking every consumer at every step when many sequences run.
   */
  readonly coalesceMs?: number
}

/** Live sequences at most, unless the options say otherwise. */
export const DEFAULT_MAX_BATCH = 32

/** One sequence's part of a step: the cache it ran on and the ids it appended. */
interface StepChunk<C> {
  readonly seq: Sequence<C>
  readonly cache: C
  readonly ids: Int32Array
}

export interface SchedulerStats {
  readonly running: number
  readonly waiting: number
  readonly held: number
  readonly steps: number
  readonly generatedTokens: number
  readonly prefillTokens: number
  readonly version: number
}

export class Scheduler<C extends DecoderCache = DecoderCache> {
  private readonly decoder: Decoder<C>
  private readonly tokenizer: Tokenizer | undefined
  private readonly stopIds: ReadonlySet<number>
  private readonly maxBatch: number
  private readonly prefillBudget: number
  private readonly coalesceMs: number
  private readonly sampler = new Sampler()
  private readonly waiting: Array<Sequence<C>> = []
  private running: Array<Sequence<C>> = []
  private held: Array<Sequence<C>> = []
  private interrupted = false
  private draining = false
  private steps = 0
  private generatedTokens = 0
  private prefillTokens = 0

  constructor(options: SchedulerOptions<C>) {
    this.decoder = options.decoder
    this.tokenizer = options.tokenizer
    this.stopIds = new Set(options.stopIds)
    this.maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH
    this.prefillBudget = options.prefillBudget ?? 512
    this.coalesceMs = options.coalesceMs ?? 0
  }

  get version(): number {
    return this.decoder.version
  }

  /** True when a step would do something. */
  get hasWork(): boolean {
    return !this.interrupted && (this.running.length > 0 || (!this.draining && this.waiting.length > 0))
  }

  /** True when no sequence is being decoded (waiting and held ones may exist). */
  get idle(): boolean {
    return this.running.length === 0 && (this.draining || this.interrupted || this.waiting.length === 0)
  }

  stats(): SchedulerStats {
    return {
      running: this.running.length,
      waiting: this.waiting.length,
      held: this.held.length,
      steps: this.steps,
      generatedTokens: this.generatedTokens,
      prefillTokens: this.prefillTokens,
      version: this.decoder.version
    }
  }

  /** Queues a request. Throws `EngineError` if it cannot run. */
  submit(requestId: string, promptIds: Int32Array, params: SamplingParams, sink: Sink): void {
    const fail = (message: string) => new EngineError({ requestId, message })
    const c = this.decoder.config
    // A sequence's KV cache is reserved whole when it is admitted: its tokens are bounded by the
    // context and by what one cache can hold, whichever is less.
    const limit = this.decoder.maxCacheTokens
    if (this.find(requestId) !== undefined) throw fail(`request ${requestId} is already running`)
    if (promptIds.length === 0) throw fail("the prompt is empty")
    if (promptIds.length >= limit) {
      const holds = limit < c.contextLength ? `the KV memory holds ${limit} tokens per sequence (the context ${c.contextLength})` : `the context holds ${c.contextLength}`
      throw fail(`the prompt has ${promptIds.length} tokens; ${holds}, leaving no room to generate`)
    }
    for (const id of promptIds) if (!(id >= 0 && id < c.vocabSize)) throw fail(`prompt token id ${id} is outside the vocabulary of ${c.vocabSize}`)
    let stops: StopMatcher
    try {
      stops = new StopMatcher(this.tokenizer, this.stopIds, params.stop)
    } catch (e) {
      throw fail(e instanceof Error ? e.message : String(e))
    }
    const budget = Math.min(params.maxTokens, limit - promptIds.length)
    this.waiting.push(newSequence({ id: requestId, prompt: promptIds, params, sink, rng: new Rng(params.seed ?? randomSeed()), stops, budget }))
  }

  /** Ends a request at once and frees its slot (a final "cancelled" chunk is emitted). */
  cancel(requestId: string): boolean {
    for (const list of [this.waiting, this.running, this.held]) {
      const i = list.findIndex((s) => s.id === requestId)
      if (i < 0) continue
      const [seq] = list.splice(i, 1)
      this.retire(seq!)
      seq!.sink.chunk(emptyChunk("cancelled"))
      return true
    }
    return false
  }

  /** Holds every live sequence at the current token boundary; returns their state. */
  interrupt(): ReadonlyArray<SequenceState> {
    this.interrupted = true
    for (const seq of this.running) flush(seq)
    this.held = [...this.held, ...this.running]
    this.running = []
    return this.held.map((s) => ({
      requestId: s.id,
      promptIds: s.prompt,
      outputIds: s.outIds.slice(0, s.count),
      versions: s.outVersions.slice(0, s.count)
    }))
  }

  /** Stops admitting new requests; running ones continue (see `idle`). */
  drain(): void {
    this.draining = true
  }

  /** Ends a pause: held sequences continue first, then admission resumes. */
  resume(): void {
    this.interrupted = false
    this.draining = false
    this.running = [...this.held, ...this.running]
    this.held = []
  }

  /** New weights: every cache is recomputed under them before its sequence's next token. */
  setWeights(source: WeightSource, version: number): void {
    this.decoder.setWeights(source, version)
  }

  /** Ends every request with `reason` (engine shutdown). */
  closeAll(reason: FinishReason): void {
    for (const seq of [...this.waiting, ...this.running, ...this.held]) {
      this.retire(seq)
      seq.sink.chunk(emptyChunk(reason))
    }
    this.waiting.length = 0
    this.running = []
    this.held = []
  }

  /**
   * Runs one step. Returns false when there was nothing to do. With a decoder that reads its
   * logits back asynchronously (a GPU), returns a promise that settles once the step's tokens
   * are out; the caller must not interrupt or set weights before then (engine.ts holds a lock).
   */
  step(): boolean | Promise<boolean> {
    if (!this.hasWork) return false
    this.admit()
    const chunks: Array<StepChunk<C>> = []
    let budget = this.prefillBudget
    // (an abort in recompute replaces `running`; this loop goes on over the array it started with)
    for (const seq of this.running) {
      if (seq.cacheVersion !== this.decoder.version && !this.recompute(seq)) continue
      const prefill = seq.pending.length > 1
      if (prefill && budget <= 0) continue
      const take = prefill ? Math.min(seq.pending.length, budget) : 1
      if (prefill) budget -= take
      chunks.push({ seq, cache: seq.cache!, ids: seq.pending.subarray(0, take) })
    }
    if (chunks.length === 0) return false
    this.steps++
    let rows: StepRows | Promise<StepRows>
    try {
      rows = this.decoder.forward(chunks, this.decoder.drawsOnDevice === true ? chunks.map((ch) => this.pickFor(ch)) : undefined)
    } catch (e) {
      this.failStep(chunks, e)
      return true
    }
    if (!(rows instanceof Promise)) {
      this.finishStep(chunks, rows)
      return true
    }
    return rows.then(
      (r) => (this.finishStep(chunks, r), true),
      (e) => (this.failStep(chunks, e), true)
    )
  }

  /**
   * The draw a decoder may make on its device for a chunk that ends its sequence's pending input,
   * when the request asks for nothing the device does not do (top-k, top-p, top logprobs). Its
   * uniform is the one the Sampler would draw, taken now from the request's RNG.
   */
  private pickFor({ seq, ids }: StepChunk<C>): Pick | undefined {
    const p = seq.params
    if (ids.length !== seq.pending.length || p.topLogprobs > 0 || p.topP < 1 || (p.topK > 0 && p.topK < this.decoder.config.vocabSize)) return undefined
    return { temperature: p.temperature, u: p.temperature > 0 ? seq.rng.uniform() : 0 }
  }

  /** Samples and emits for every chunk whose sequence is still the one the step ran (not cancelled meanwhile). */
  private finishStep(chunks: ReadonlyArray<StepChunk<C>>, rows: StepRows): void {
    chunks.forEach(({ seq, cache, ids }, i) => {
      if (seq.cache !== cache) return
      if (ids.length > 1) this.prefillTokens += ids.length
      seq.pending = seq.pending.subarray(ids.length)
      if (seq.pending.length > 0) return
      const row = rows[i]!
      this.emit(seq, row instanceof Float32Array ? this.sampler.sample(row, seq.params, seq.rng) : { ...row, topIds: undefined, topLogprobs: undefined })
    })
  }

  private failStep(chunks: ReadonlyArray<StepChunk<C>>, e: unknown): void {
    for (const { seq, cache } of chunks) {
      if (seq.cache === cache) this.abort(seq, new EngineError({ requestId: seq.id, message: `forward pass failed: ${String(e)}`, cause: e }))
    }
  }

  private find(requestId: string): Sequence<C> | undefined {
    return [...this.waiting, ...this.running, ...this.held].find((s) => s.id === requestId)
  }

  /**
   * Admits waiting requests in order while there is a batch slot and KV memory for the next one's
   * whole cache (prompt + budget), reserved now so that a running sequence never runs out of it.
   * When the memory is full the queue waits for running sequences to finish; once none is live,
   * any cache within `maxCacheTokens` fits, so the head of the queue is never stuck.
   */
  private admit(): void {
    while (!this.draining && this.waiting.length > 0 && this.running.length < this.maxBatch) {
      const seq = this.waiting[0]!
      const cache = this.decoder.tryNewCache(seq.prompt.length + seq.budget)
      if (cache === undefined) return
      seq.cache = cache
      seq.cacheVersion = this.decoder.version
      this.running.push(this.waiting.shift()!)
    }
  }

  /** (Re)builds a sequence's cache from scratch under the current weights. */
  private recompute(seq: Sequence<C>): boolean {
    if (seq.cache !== undefined) this.decoder.releaseCache(seq.cache)
    // The region just released has this very size, so it is there to take again.
    seq.cache = this.decoder.tryNewCache(seq.prompt.length + seq.budget)
    if (seq.cache === undefined) {
      this.abort(seq, new EngineError({ requestId: seq.id, message: "the KV memory could not hold the sequence's cache again after new weights" }))
      return false
    }
    seq.cacheVersion = this.decoder.version
    seq.pending = allTokens(seq)
    return true
  }

  /** Emits the next token of `seq`, and retires the sequence if it is done. */
  private emit(seq: Sequence<C>, s: Sampled): void {
    record(seq, s, this.decoder.version)
    this.generatedTokens++
    const stop = seq.stops.push(s.id)
    const finish: FinishReason | undefined = stop !== undefined ? "stop" : seq.count >= seq.budget ? "length" : undefined
    const now = this.coalesceMs > 0 ? performance.now() : 0
    if (finish !== undefined || this.coalesceMs === 0 || now - seq.lastEmit >= this.coalesceMs) {
      seq.lastEmit = now
      flush(seq, {
        ...(finish !== undefined ? { finishReason: finish } : {}),
        ...(stop?.kind === "string" ? { matchedStop: stop.stop } : {})
      })
    }
    if (finish !== undefined) {
      this.running = this.running.filter((r) => r !== seq)
      this.retire(seq)
    } else {
      seq.pending = Int32Array.of(s.id)
    }
  }

  private abort(seq: Sequence<C>, error: EngineError): void {
    this.running = this.running.filter((r) => r !== seq)
    this.retire(seq)
    seq.sink.fail(error)
  }

  private retire(seq: Sequence<C>): void {
    if (seq.cache !== undefined) this.decoder.releaseCache(seq.cache)
    seq.cache = undefined
  }
}
