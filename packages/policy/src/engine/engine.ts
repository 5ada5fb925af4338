/**
 * The generation engine as an Effect service: the `Scheduler` stepped on a scoped fiber that
 * yields to the event loop between steps (so requests, cancellations and pauses get in at every
 * token boundary), with each request's tokens streamed as `GenerateChunk`s.
 *
 * It runs wherever the device is (the Trainer's worker thread); the Gateway talks to it by
 * message. Interrupting a `generate` stream cancels the request and frees its slot at once.
 *
 *   pause("interrupt")   holds live sequences at a token boundary; resolves with their state
 *   pause("drain")       stops admitting; resolves when no sequence is live
 *   setWeights(v, model) takes the model's current weights as version v; held or running
 *                        sequences recompute their KV cache under them before their next token
 *   resume               continues held sequences and admission
 *
 * Both pauses resolve when the device is free: no step runs until `resume`.
 *
 * `stats.parked` says the loop has looked at everything that changed since it last ran (requests,
 * pauses, weights) and found nothing it may run: it waits, and no step happens until the next
 * change. It is how a caller can tell "held" from "not picked up yet" without a timer.
 */
import type { GenerateChunk, GenerateRequest, PauseMode } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Chunk, Context, Deferred, Effect, Layer, Queue, type Scope, Stream, Take } from "effect"
import type { Transformer } from "../model/transformer.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { type Decoder, type DeviceDecoder, DeviceEngineDecoder, FastEngineDecoder, type WeightSource } from "./decoder.js"
import { WebGpuDecoder } from "../model/webgpuDecode.js"
import { DEFAULT_MAX_BATCH, EngineError, Scheduler, type SchedulerStats, type SequenceState } from "./scheduler.js"

export interface EngineOptions {
  readonly model: Transformer
  /** For stop strings; its `stopIds` are the default stop ids. */
  readonly tokenizer?: Tokenizer
  /** Ids that end a generation (default: the tokenizer's stop ids). */
  readonly stopIds?: ReadonlyArray<number>
  /** Policy version of the model's current weights (default `model.version`). */
  readonly version?: number
  readonly maxBatch?: number
  readonly prefillBudget?: number
  /**
   * Bytes of memory for the KV caches. The fast decoder keeps them (and its attention scratch)
   * in its kernels' wasm memory: default and most wasm32's 4 GiB. The device decoders keep them
   * on the device: default 4 GiB, and never more than `maxBatch` whole-context caches need.
   * Requests wait for room.
   */
  readonly kvBytes?: number
  /**
   * The decode path (default: `defaultDecoder()`), or a device decoder of the caller's own, made
   * from the model, its version and the KV memory (tests plug in a reference this way).
   */
  readonly decoder?: DecoderKind | DeviceDecoderFactory
  /**
   * A sequence's tokens are sent together until this many ms have passed since its last chunk
   * (default 10; 0 sends every token alone). Waking every consumer fiber at every step costs
   * more than the step itself at 16+ sequences; 10 ms is invisible to a reader.
   */
  readonly coalesceMs?: number
}

/**
 * Which decode path the engine runs, one per backend: "fast" (model/fastDecode.ts: typed arrays
 * and wasm kernels, reads synchronously; the CPU backends) or "webgpu" (model/webgpuDecode.ts: its
 * own compute shaders on tfjs's WebGPU device, one asynchronous read per step).
 */
export type DecoderKind = "fast" | "webgpu"

/** A device decoder of the caller's own: the model, the version its weights are, the KV memory. */
export type DeviceDecoderFactory = (
  model: Transformer,
  version: number,
  options: { readonly kvBytes: number; readonly maxSequences: number }
) => DeviceDecoder

/** "webgpu" on the WebGPU backend, "fast" elsewhere. */
export const defaultDecoder = (): DecoderKind => (tf.getBackend() === "webgpu" ? "webgpu" : "fast")

/** KV memory of a device decoder when none is given (it takes no more than its batch can use). */
const DEFAULT_KV_BYTES = 4 * 1024 ** 3

export interface GenerationEngine {
  /** Streams the sampled tokens; the last chunk has a finish reason. Interrupting it cancels. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, EngineError>
  readonly cancel: (requestId: string) => Effect.Effect<boolean>
  readonly pause: (mode: PauseMode) => Effect.Effect<ReadonlyArray<SequenceState>>
  readonly interrupt: Effect.Effect<ReadonlyArray<SequenceState>>
  readonly drain: Effect.Effect<void>
  readonly resume: Effect.Effect<void>
  /** New weights as version `version`: a model's current variables, or plain weights by name. */
  readonly setWeights: (version: number, weights: WeightSource) => Effect.Effect<void, EngineError>
  readonly stats: Effect.Effect<EngineStats>
  /** The most tokens one sequence can hold (prompt and output): the context, or less when the KV memory is smaller. */
  readonly maxSequenceTokens: number
}

export interface EngineStats extends SchedulerStats {
  /** The loop has seen every change so far and has nothing to run: it waits for the next one. */
  readonly parked: boolean
}

/** Lets the event loop run (I/O, timers, other fibers) before the next step. */
export const yieldToEventLoop = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

export const makeEngine = (options: EngineOptions): Effect.Effect<GenerationEngine, never, Scope.Scope> =>
  Effect.gen(function* () {
    const version = options.version ?? options.model.version
    const kind = options.decoder ?? defaultDecoder()
    const onDevice = { kvBytes: options.kvBytes ?? DEFAULT_KV_BYTES, maxSequences: options.maxBatch ?? DEFAULT_MAX_BATCH }
    const decoder: Decoder = kind === "fast"
      ? new FastEngineDecoder(options.model, version, options.kvBytes !== undefined ? { kvBytes: options.kvBytes } : {})
      : new DeviceEngineDecoder(kind === "webgpu" ? new WebGpuDecoder(options.model, version, onDevice) : kind(options.model, version, onDevice))
    // A step that reads its logits back asynchronously (a GPU) holds this until its tokens are
    // out: a pause or new weights wait for it, so no cache is changed under a step in flight.
    const stepLock = (yield* Effect.makeSemaphore(1)).withPermits(1)
    const scheduler = new Scheduler({
      decoder,
      ...(options.tokenizer !== undefined ? { tokenizer: options.tokenizer } : {}),
      stopIds: options.stopIds ?? options.tokenizer?.stopIds ?? [],
      ...(options.maxBatch !== undefined ? { maxBatch: options.maxBatch } : {}),
      ...(options.prefillBudget !== undefined ? { prefillBudget: options.prefillBudget } : {}),
      coalesceMs: options.coalesceMs ?? 10
    })
    const kick = yield* Queue.sliding<void>(1)
    let idleWaiters: Array<Deferred.Deferred<void>> = []
    let parked = false
    // Every change a step could depend on goes through here: the loop must look again before it
    // counts as parked.
    const wake = () => {
      parked = false
      Queue.unsafeOffer(kick, undefined)
    }
    const notifyIdle = Effect.suspend(() => {
      if (!scheduler.idle || idleWaiters.length === 0) return Effect.void
      const waiters = idleWaiters
      idleWaiters = []
      return Effect.forEach(waiters, (d) => Deferred.succeed(d, undefined), { discard: true })
    })

    // Runs last (after the loop fiber below is interrupted): end every request, free the weights.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        scheduler.closeAll("interrupted")
        decoder.dispose()
      })
    )
    yield* Effect.gen(function* () {
      while (true) {
        yield* notifyIdle
        if (!scheduler.hasWork) {
          parked = true
          yield* Queue.take(kick)
          continue
        }
        yield* stepLock(Effect.suspend(() => {
          const stepped = scheduler.step()
          return typeof stepped === "boolean" ? Effect.void : Effect.promise(() => stepped)
        }))
        yield* yieldToEventLoop
      }
    }).pipe(Effect.forkScoped)

    // Chunks go through a plain queue offered to synchronously by the scheduler's sink (cheap
    // per token); the stream's scope cancels the request if the consumer stops early.
    const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, EngineError> =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          const queue = yield* Queue.unbounded<Take.Take<GenerateChunk, EngineError>>()
          let open = true
          yield* Effect.try({
            try: () =>
              scheduler.submit(request.requestId, request.promptIds, request.params, {
                chunk: (c) => {
                  if (!open) return
                  Queue.unsafeOffer(queue, Take.of(c))
                  if (c.finishReason !== undefined) {
                    open = false
                    Queue.unsafeOffer(queue, Take.end)
                  }
                },
                fail: (e) => {
                  if (!open) return
                  open = false
                  Queue.unsafeOffer(queue, Take.fail(e))
                }
              }),
            catch: (e) => (e instanceof EngineError ? e : new EngineError({ requestId: request.requestId, message: String(e), cause: e }))
          })
          wake()
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              if (open) {
                open = false
                scheduler.cancel(request.requestId)
              }
            })
          )
          return Stream.flattenTake(Stream.fromQueue(queue))
        })
      )

    const drain = Effect.gen(function* () {
      scheduler.drain()
      if (scheduler.idle) return
      const done = yield* Deferred.make<void>()
      idleWaiters.push(done)
      wake()
      yield* Deferred.await(done)
    })
    const interrupt = stepLock(Effect.sync(() => scheduler.interrupt()))

    return {
      generate,
      cancel: (requestId) => Effect.sync(() => scheduler.cancel(requestId)),
      pause: (mode) => (mode === "interrupt" ? interrupt : Effect.as(drain, [])),
      interrupt,
      drain,
      resume: Effect.sync(() => {
        scheduler.resume()
        wake()
      }),
      setWeights: (v, weights) =>
        stepLock(Effect.try({
          try: () => {
            scheduler.setWeights(weights, v)
            wake()
          },
          catch: (e) => new EngineError({ requestId: "", message: `setWeights: ${e instanceof Error ? e.message : String(e)}`, cause: e })
        })),
      stats: Effect.sync(() => ({ ...scheduler.stats(), parked })),
      maxSequenceTokens: decoder.maxCacheTokens
    } satisfies GenerationEngine
  })

export class Engine extends Context.Tag("@reins/policy/Engine")<Engine, GenerationEngine>() {
  static readonly layer = (options: EngineOptions): Layer.Layer<Engine> => Layer.scoped(Engine, makeEngine(options))
}

/** A whole generation, collected. */
export interface Generation {
  readonly outputIds: Int32Array
  readonly logprobs: Float32Array
  readonly versions: Int32Array
  readonly topIds: Int32Array | undefined
  readonly topLogprobs: Float32Array | undefined
  readonly finishReason: GenerateChunk["finishReason"]
  readonly matchedStop: string | undefined
}

/** Concatenates the chunks of one generation. */
export const collectChunks = (chunks: Iterable<GenerateChunk>): Generation => {
  const list = [...chunks]
  const cat = <A extends Int32Array | Float32Array>(parts: Array<A | undefined>, make: (n: number) => A): A => {
    const out = make(parts.reduce((n, p) => n + (p?.length ?? 0), 0))
    let o = 0
    for (const p of parts) if (p !== undefined) (out.set(p, o), (o += p.length))
    return out
  }
  const last = list[list.length - 1]
  const withTop = list.some((c) => c.topIds !== undefined)
  return {
    outputIds: cat(list.map((c) => c.outputIds), (n) => new Int32Array(n)),
    logprobs: cat(list.map((c) => c.logprobs), (n) => new Float32Array(n)),
    versions: cat(list.map((c) => c.versions), (n) => new Int32Array(n)),
    topIds: withTop ? cat(list.map((c) => c.topIds), (n) => new Int32Array(n)) : undefined,
    topLogprobs: withTop ? cat(list.map((c) => c.topLogprobs), (n) => new Float32Array(n)) : undefined,
    finishReason: last?.finishReason,
    matchedStop: last?.matchedStop
  }
}

/** Runs a request to the end and collects it. */
export const generateAll = (engine: GenerationEngine, request: GenerateRequest): Effect.Effect<Generation, EngineError> =>
  Stream.runCollect(engine.generate(request)).pipe(Effect.map((chunks) => collectChunks(Chunk.toReadonlyArray(chunks))))
