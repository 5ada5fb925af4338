/**
 * The generation engine: seeded sampling is reproducible; returned logprobs are the
 * log-softmax of the (temperature-scaled) logits at the sampled token, checked against the tfjs
 * reference forward pass; stop tokens, stop strings, max_tokens and the context end generations
 * with the right reason; requests joining a running batch get the same tokens as alone;
 * cancelling frees the slot at once; interrupt → new weights → resume continues every sequence
 * coherently with per-token versions that switch once; drain waits; bad requests fail clearly;
 * and no tensor leaks across many generate and train steps.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  AdamW,
  type DecoderKind,
  type DeviceDecoderFactory,
  DecodeWeights,
  FastDecoder,
  EngineError,
  type GenerationEngine,
  generateAll,
  makeEngine,
  packSequences,
  trainStep,
  Transformer
} from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Chunk, Deferred, Effect, Exit, Fiber, Stream } from "effect"
import { beforeAll } from "vitest"
import { backend, logSoftmaxAt, referenceLogits, tinyConfig, tinyTokenizer } from "./model-fixtures.js"
import { TensorDecoder } from "./reference/tensorDecoder.js"

beforeAll(() => backend())

const tok = tinyTokenizer()
const V = tok.vocabSize

const params = (p: Partial<ConstructorParameters<typeof SamplingParams>[0]> = {}) =>
  new SamplingParams({ maxTokens: 12, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0, ...p })

let counter = 0
const request = (promptIds: ArrayLike<number>, p: Partial<ConstructorParameters<typeof SamplingParams>[0]> = {}, requestId = `r${counter++}`) =>
  new GenerateRequest({ requestId, promptIds: Int32Array.from(promptIds), params: params(p) })

const prompt = (seed: number, n = 6) => Array.from({ length: n }, (_, i) => (seed * 31 + i * 7) % (V - 10))

/** The decode path the engines of the running describe block use. */
let decoderKind: DecoderKind | DeviceDecoderFactory = "fast"

const withEngine = <A, E>(
  model: Transformer,
  f: (engine: GenerationEngine) => Effect.Effect<A, E>,
  options: { maxBatch?: number; stopIds?: Array<number>; coalesceMs?: number; kvBytes?: number } = {}
) =>
  Effect.scoped(
    Effect.flatMap(
      makeEngine({
        model,
        tokenizer: tok,
        stopIds: options.stopIds ?? [],
        decoder: decoderKind,
        ...(options.maxBatch !== undefined ? { maxBatch: options.maxBatch } : {}),
        ...(options.coalesceMs !== undefined ? { coalesceMs: options.coalesceMs } : {}),
        ...(options.kvBytes !== undefined ? { kvBytes: options.kvBytes } : {})
      }),
      f
    )
  )

/**
 * Polls the engine until it is parked (it has looked at every change and has nothing it may run)
 * with a request in it, or has sampled past `sampledBefore`: the held state, or the proof there
 * is none. Bounded; needs the live clock.
 */
const settled = (engine: GenerationEngine, sampledBefore: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < 2_000; i++) {
      const stats = yield* engine.stats
      if (stats.parked && (stats.waiting + stats.running + stats.held > 0 || stats.generatedTokens > sampledBefore)) return stats
      yield* Effect.sleep("5 millis")
    }
    return yield* Effect.dieMessage("the engine never settled")
  })

/** The greedy continuation of `ids` under the tfjs reference, `n` tokens, full recompute each step. */
const referenceGreedy = (model: Transformer, ids: ReadonlyArray<number>, n: number): Array<number> => {
  const seq = [...ids]
  for (let i = 0; i < n; i++) {
    const logits = referenceLogits(model, Int32Array.from(seq))
    const row = logits.subarray((seq.length - 1) * V, seq.length * V)
    let best = 0
    for (let j = 1; j < V; j++) if (row[j]! > row[best]!) best = j
    seq.push(best)
  }
  return seq.slice(ids.length)
}

// Every engine behaviour holds on both kinds of decoder: the CPU's (fastDecode.ts), read
// synchronously, and a device decoder read back asynchronously (WebGPU's kind; here the
// reference decoder of tfjs ops, on the test backend).
const deviceReference: DeviceDecoderFactory = (model, version, options) => new TensorDecoder(model, version, options)
describe.each([["fast", "fast"], ["device (reference)", deviceReference]] as const)("%s decoder", (_, decoder) => {
  beforeAll(() => {
    decoderKind = decoder
  })

  describe("sampling", () => {
    const model = Transformer.init(tinyConfig(V), 21)

    it.effect("seeded sampling is reproducible, and another seed samples differently", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          const run = (seed: number) => generateAll(engine, request(prompt(1), { temperature: 1, seed, maxTokens: 20 }))
          const a = yield* run(42)
          const b = yield* run(42)
          const c = yield* run(43)
          expect([...a.outputIds]).toEqual([...b.outputIds])
          expect([...a.logprobs]).toEqual([...b.logprobs])
          expect([...a.outputIds]).not.toEqual([...c.outputIds])
          // top-k / top-p sampling is seeded too.
          const d = yield* generateAll(engine, request(prompt(1), { temperature: 0.9, topK: 20, topP: 0.9, seed: 5, maxTokens: 20 }))
          const e = yield* generateAll(engine, request(prompt(1), { temperature: 0.9, topK: 20, topP: 0.9, seed: 5, maxTokens: 20 }))
          expect([...d.outputIds]).toEqual([...e.outputIds])
        })
      )
    )

    it.effect("logprobs are log softmax(logits / temperature) at the sampled token, top logprobs the k best", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          for (const temperature of [0.7, 1.3]) {
            const p = prompt(2)
            const g = yield* generateAll(engine, request(p, { temperature, seed: 9, maxTokens: 10, topLogprobs: 3 }))
            expect(g.outputIds.length).toBe(10)
            const all = [...p, ...g.outputIds]
            const logits = referenceLogits(model, Int32Array.from(all))
            for (let i = 0; i < g.outputIds.length; i++) {
              const row = logits.subarray((p.length - 1 + i) * V, (p.length + i) * V)
              expect(Math.abs(g.logprobs[i]! - logSoftmaxAt(row, g.outputIds[i]!, temperature))).toBeLessThan(1e-4)
              const top = Array.from({ length: V }, (_, j) => j).sort((a, b) => row[b]! - row[a]!)
              expect([...g.topIds!.subarray(i * 3, i * 3 + 3)]).toEqual(top.slice(0, 3))
              for (let k = 0; k < 3; k++) expect(Math.abs(g.topLogprobs![i * 3 + k]! - logSoftmaxAt(row, top[k]!, temperature))).toBeLessThan(1e-4)
            }
          }
        })
      )
    )

    it.effect("temperature 0 is greedy (logprob at τ = 1); top_k = 1 and top_p = 0 are greedy too", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          const p = prompt(3)
          const greedy = yield* generateAll(engine, request(p, { maxTokens: 8 }))
          expect([...greedy.outputIds]).toEqual(referenceGreedy(model, p, 8))
          const logits = referenceLogits(model, Int32Array.from([...p, ...greedy.outputIds]))
          greedy.outputIds.forEach((id, i) => {
            expect(Math.abs(greedy.logprobs[i]! - logSoftmaxAt(logits.subarray((p.length - 1 + i) * V, (p.length + i) * V), id))).toBeLessThan(1e-4)
          })
          const k1 = yield* generateAll(engine, request(p, { maxTokens: 8, temperature: 1, topK: 1, seed: 1 }))
          const p0 = yield* generateAll(engine, request(p, { maxTokens: 8, temperature: 1, topP: 0, seed: 2 }))
          expect([...k1.outputIds]).toEqual([...greedy.outputIds])
          expect([...p0.outputIds]).toEqual([...greedy.outputIds])
        })
      )
    )
  })

  describe("finishing", () => {
    const model = Transformer.init(tinyConfig(V), 22)
    const p = prompt(4)
    const greedy = referenceGreedy(model, p, 12)

    it.effect("max_tokens and the end of the context give `length`", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          const g = yield* generateAll(engine, request(p, { maxTokens: 5 }))
          expect(g.finishReason).toBe("length")
          expect(g.outputIds.length).toBe(5)
          const long = Array.from({ length: 62 }, (_, i) => i % 50)
          const c = yield* generateAll(engine, request(long, { maxTokens: 10 }))
          expect(c.finishReason).toBe("length")
          expect(c.outputIds.length).toBe(2) // context 64
        })
      )
    )

    it.effect("a stop token ends the generation on that token", () =>
      withEngine(
        model,
        (engine) =>
          Effect.gen(function* () {
            const g = yield* generateAll(engine, request(p, { maxTokens: 12 }))
            expect(g.finishReason).toBe("stop")
            expect([...g.outputIds]).toEqual(greedy.slice(0, greedy.indexOf(greedy[3]!) + 1))
          }),
        { stopIds: [greedy[3]!] }
      )
    )

    it.effect("a stop string is matched across token boundaries", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          // A stop string made of the end of token 4's text and the start of token 5's.
          const before = tok.decode(greedy.slice(0, 4))
          const text = tok.decode(greedy.slice(0, 6))
          const stop = text.slice(Math.max(0, before.length - 1), before.length + 1)
          expect(stop.length).toBeGreaterThan(0)
          const g = yield* generateAll(engine, request(p, { maxTokens: 12, stop: ["never appears \u0000", stop] }))
          expect(g.finishReason).toBe("stop")
          expect(g.matchedStop).toBe(stop)
          const out = tok.decode(g.outputIds)
          expect(out.includes(stop)).toBe(true)
          expect(tok.decode(g.outputIds.subarray(0, g.outputIds.length - 1)).includes(stop)).toBe(false)
        })
      )
    )
  })

  describe("continuous batching", () => {
    const model = Transformer.init(tinyConfig(V), 23)

    it.effect("requests joining mid-flight get the same tokens as when run alone", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          const prompts = [prompt(10, 5), prompt(11, 9), prompt(12, 3), prompt(13, 14)]
          const alone: Array<Array<number>> = []
          for (const p of prompts) alone.push([...(yield* generateAll(engine, request(p, { maxTokens: 15 }))).outputIds])
          // Staggered: each request starts once the previous one has produced 3 tokens. (Tokens
          // arrive in chunks of one or more: the engine coalesces a sequence's tokens for 10 ms.)
          const fibers: Array<Fiber.RuntimeFiber<Array<number>, EngineError>> = []
          for (const p of prompts) {
            const started = yield* Deferred.make<void>()
            let seen = 0
            const fiber = yield* engine.generate(request(p, { maxTokens: 15 })).pipe(
              Stream.tap((c) => ((seen += c.outputIds.length) >= 3 ? Deferred.succeed(started, undefined) : Effect.void)),
              Stream.runCollect,
              Effect.map((chunks) => Chunk.toReadonlyArray(chunks).flatMap((c) => [...c.outputIds])),
              Effect.fork
            )
            fibers.push(fiber)
            yield* Deferred.await(started)
          }
          const together = yield* Effect.forEach(fibers, Fiber.join)
          expect(together).toEqual(alone)
          expect((yield* engine.stats).steps).toBeGreaterThan(0)
        })
      )
    )

    it.effect("cancelling a request (its consumer went away) frees the slot at once", () =>
      withEngine(
        model,
        (engine) =>
          Effect.gen(function* () {
            const first = yield* engine.generate(request(prompt(14), { maxTokens: 60 }, "long")).pipe(Stream.take(2), Stream.runCollect, Effect.fork)
            const second = yield* generateAll(engine, request(prompt(15), { maxTokens: 4 }, "next")).pipe(Effect.fork)
            const taken = yield* Fiber.join(first)
            expect(Chunk.size(taken)).toBe(2)
            // At once: by the time its consumer's stream has ended, the request is gone from the
            // engine (cancelling it again finds nothing).
            expect(yield* engine.cancel("long")).toBe(false)
            const done = yield* Fiber.join(second)
            expect(done.outputIds.length).toBe(4)
            const stats = yield* engine.stats
            expect(stats.running).toBe(0)
            expect(stats.waiting).toBe(0)
            // It did not run on: with one slot, "next" ran only after it, and fewer than its 60 tokens were sampled.
            expect(stats.generatedTokens - 4).toBeLessThan(60)
          }),
        { maxBatch: 1, coalesceMs: 0 } // one token per chunk, so "2 chunks" is 2 tokens
      )
    )
  })

  describe("pausing", () => {
    it.live("interrupt → new weights → resume continues each sequence coherently, versions switching once", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V), 30)
        const next = Transformer.init(tinyConfig(V), 31)
        const prompts = [prompt(20), prompt(21, 4)]
        yield* withEngine(model, (engine) =>
          Effect.gen(function* () {
            const progressed = yield* Deferred.make<void>()
            let count = 0
            const fibers = yield* Effect.forEach(prompts, (p, i) =>
              engine.generate(request(p, { maxTokens: 40 }, `seq${i}`)).pipe(
                Stream.tap((c) => ((count += c.outputIds.length) >= 8 ? Deferred.succeed(progressed, undefined) : Effect.void)),
                Stream.runCollect,
                Effect.map((chunks) => Chunk.toReadonlyArray(chunks)),
                Effect.fork
              )
            )
            yield* Deferred.await(progressed)
            const states = yield* engine.pause("interrupt")
            expect(states.map((s) => s.requestId).sort()).toEqual(["seq0", "seq1"])
            const atPause = yield* engine.stats
            // The device is free: the loop has seen the pause and parked with both sequences held;
            // nothing runs until the next change. (An engine still decoding would sample on.)
            expect(yield* settled(engine, atPause.generatedTokens)).toMatchObject({ held: 2, running: 0, steps: atPause.steps })
            model.setWeights(next.readWeights(), 1)
            yield* engine.setWeights(1, model)
            yield* engine.resume
            const results = yield* Effect.forEach(fibers, Fiber.join)
            results.forEach((chunks, i) => {
              const ids = chunks.flatMap((c) => [...c.outputIds])
              const versions = chunks.flatMap((c) => [...c.versions])
              const state = states.find((s) => s.requestId === `seq${i}`)!
              const k = state.outputIds.length
              expect(ids.length).toBe(40)
              expect(chunks[chunks.length - 1]!.finishReason).toBe("length")
              expect(ids.slice(0, k)).toEqual([...state.outputIds])
              // Versions: 0 up to the pause, 1 after — one switch, monotone.
              expect(versions).toEqual([...Array(k).fill(0), ...Array(40 - k).fill(1)])
              expect(k).toBeGreaterThan(0)
              // Coherent: the tokens after the switch are the new weights' greedy continuation of
              // the prompt plus the tokens before it (a KV cache recomputed under the new weights).
              expect(ids.slice(k)).toEqual(referenceGreedy(next, [...prompts[i]!, ...ids.slice(0, k)], 40 - k))
            })
          })
        )
        model.dispose()
        next.dispose()
      })
    )

    it.live("drain lets live sequences finish and holds new ones until resume", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V), 32)
        yield* withEngine(model, (engine) =>
          Effect.gen(function* () {
            const started = yield* Deferred.make<void>()
            const live = yield* engine.generate(request(prompt(30), { maxTokens: 10 })).pipe(
              Stream.tap(() => Deferred.succeed(started, undefined)),
              Stream.runCollect,
              Effect.fork
            )
            yield* Deferred.await(started)
            yield* engine.pause("drain")
            // Resolved only once the live sequence has finished: nothing is left to collect.
            expect((yield* engine.stats).running).toBe(0)
            const finished = yield* Fiber.join(live)
            expect(Chunk.toReadonlyArray(finished).flatMap((c) => [...c.outputIds]).length).toBe(10)
            const atDrain = yield* engine.stats
            const held = yield* generateAll(engine, request(prompt(31), { maxTokens: 3 })).pipe(Effect.fork)
            // Held: the engine has seen the new request and parked with it queued, nothing sampled.
            const stats = yield* settled(engine, atDrain.generatedTokens)
            expect(stats).toMatchObject({ waiting: 1, running: 0, steps: atDrain.steps, generatedTokens: atDrain.generatedTokens })
            yield* engine.resume
            expect((yield* Fiber.join(held)).outputIds.length).toBe(3)
          })
        )
        model.dispose()
      })
    )
  })

  describe("weights", () => {
    it.effect("setWeights takes plain weights too, and refuses weights that do not fit the model", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V), 33)
        const other = Transformer.init(tinyConfig(V), 34)
        yield* withEngine(model, (engine) =>
          Effect.gen(function* () {
            yield* engine.setWeights(5, other.readWeights())
            const g = yield* generateAll(engine, request(prompt(40), { maxTokens: 6 }))
            expect([...g.outputIds]).toEqual(referenceGreedy(other, prompt(40), 6))
            expect([...g.versions]).toEqual([5, 5, 5, 5, 5, 5])
            const { ["norm.weight"]: _dropped, ...partial } = other.readWeights()
            const exit = yield* Effect.exit(engine.setWeights(6, partial))
            expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error.message).toMatch(/missing parameter norm.weight/)
            expect((yield* engine.stats).version).toBe(5)
          })
        )
        model.dispose()
        other.dispose()
      })
    )
  })

  describe("KV memory", () => {
    // tinyConfig: 2 layers × kv width 32 → 512 bytes of cache per token; caches come in 64 tokens.
    const CACHE_64 = 64 * 512

    it.effect("requests wait for room in the KV memory, and get the tokens they get with room to spare", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V), 60)
        const requests = (tag: string) =>
          Array.from({ length: 6 }, (_, i) => request(prompt(60 + i), { maxTokens: 40, temperature: 1, seed: 100 + i }, `${tag}${i}`))
        const run = (kvBytes?: number) =>
          withEngine(model, (engine) =>
            Effect.gen(function* () {
              let maxRunning = 0
              let maxWaiting = 0
              const watch = yield* Effect.fork(
                Effect.forever(
                  Effect.flatMap(engine.stats, (s) =>
                    Effect.sync(() => {
                      maxRunning = Math.max(maxRunning, s.running)
                      maxWaiting = Math.max(maxWaiting, s.waiting)
                    })
                  ).pipe(Effect.zipRight(Effect.yieldNow()))
                )
              )
              const outs = yield* Effect.forEach(requests(kvBytes === undefined ? "roomy" : "tight"), (r) => generateAll(engine, r), { concurrency: "unbounded" })
              yield* Fiber.interrupt(watch)
              return { outs, maxRunning, maxWaiting }
            }), kvBytes === undefined ? {} : { kvBytes })
        const roomy = yield* run()
        // room for two caches of 64 tokens beside the decoder's scratch (under 2 KiB here), not three
        const tight = yield* run(2 * CACHE_64 + 4096)
        expect(roomy.maxRunning).toBeGreaterThan(2)
        expect(tight.maxRunning).toBeLessThanOrEqual(2)
        expect(tight.maxWaiting).toBeGreaterThan(0)
        for (let i = 0; i < 6; i++) {
          expect(Array.from(tight.outs[i]!.outputIds)).toEqual(Array.from(roomy.outs[i]!.outputIds))
          expect(tight.outs[i]!.finishReason).toBe(roomy.outs[i]!.finishReason)
        }
      }), 60_000)

    it.effect("holds fewer tokens per sequence than the context when the memory is small, says so, and keeps serving", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V, { contextLength: 256 }), 61)
        yield* withEngine(model, (engine) =>
          Effect.gen(function* () {
            // two 64-token blocks fit beside the scratch; a third does not
            expect(engine.maxSequenceTokens).toBe(128)
            const exit = yield* Effect.exit(generateAll(engine, request(Array.from({ length: 130 }, (_, i) => i % 50))))
            const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
            expect(error?.message).toMatch(/the prompt has 130 tokens; the KV memory holds 128 tokens per sequence \(the context 256\)/)
            // as at the context's end: cut at what the memory holds
            const long = yield* generateAll(engine, request(prompt(62), { maxTokens: 500 }))
            expect(long.outputIds.length).toBe(128 - 6)
            expect(long.finishReason).toBe("length")
            const after = yield* generateAll(engine, request(prompt(63), { maxTokens: 5 }))
            expect(after.outputIds.length).toBe(5)
          }), { kvBytes: 2 * CACHE_64 + 4096 })
      }), 60_000)

    it.runIf(decoder === "fast")("a cache above 2 GiB of kernel memory decodes as one at the bottom", () => {
      // 512 MiB caches (1M tokens × 512 bytes) fill the first 2.5 GiB; the pages are never touched.
      const model = Transformer.init(tinyConfig(V, { contextLength: 1 << 20 }), 62)
      const weights = DecodeWeights.fromModel(model)
      const ids = Int32Array.from(prompt(64, 9))
      const low = new FastDecoder(weights)
      const expected = low.forward([{ cache: low.newCache(64), ids }], "all").slice()
      const high = new FastDecoder(weights)
      const fillers = Array.from({ length: 5 }, () => high.newCache(1 << 20))
      const cache = high.newCache(64)
      expect(cache.offset).toBeGreaterThan(2 ** 31)
      const got = high.forward([{ cache, ids }], "all")
      let worst = 0
      for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(got[i]! - expected[i]!))
      expect(worst).toBeLessThan(1e-5)
      for (const f of [...fillers, cache]) high.freeCache(f)
      low.dispose()
      high.dispose()
      weights.dispose()
      model.dispose()
    })
  })

  describe("bad requests", () => {
    const model = Transformer.init(tinyConfig(V), 40)

    it.effect("fail with an EngineError saying why", () =>
      withEngine(model, (engine) =>
        Effect.gen(function* () {
          const fails = (r: GenerateRequest) =>
            Effect.gen(function* () {
              const exit = yield* Effect.exit(generateAll(engine, r))
              expect(Exit.isFailure(exit)).toBe(true)
              const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
              expect(error).toBeInstanceOf(EngineError)
              return error!.message
            })
          expect(yield* fails(request([]))).toMatch(/empty/)
          expect(yield* fails(request(Array.from({ length: 64 }, () => 1)))).toMatch(/no room/)
          expect(yield* fails(request([1, V + 5]))).toMatch(/outside the vocabulary/)
          const started = yield* Deferred.make<void>()
          const running = yield* engine
            .generate(request(prompt(5), { maxTokens: 30 }, "dup"))
            .pipe(Stream.tap(() => Deferred.succeed(started, undefined)), Stream.runDrain, Effect.fork)
          yield* Deferred.await(started)
          expect(yield* fails(request(prompt(5), {}, "dup"))).toMatch(/already running/)
          yield* Fiber.join(running)
        })
      )
    )
  })

  describe("tensors", () => {
    it.effect("the tensor count is the same after 1,000 generate and 1,000 train steps", () =>
      Effect.gen(function* () {
        const model = Transformer.init(tinyConfig(V, { dModel: 16, nLayers: 1, nHeads: 2, dFf: 32 }), 50)
        const opt = new AdamW(model.params, { lr: 1e-3, maxGradNorm: 1 })
        const batches = packSequences([{ tokens: Int32Array.from(prompt(50, 12)), weights: new Float32Array(12).fill(1 / 11) }], { maxTokens: 64, maxSeqLen: 16 })
        yield* withEngine(model, (engine) =>
          Effect.gen(function* () {
            const warm = yield* generateAll(engine, request(prompt(51), { maxTokens: 4 }))
            yield* Effect.promise(() => trainStep(model, opt, batches, { kind: "sft" }))
            yield* engine.setWeights(1, model)
            expect(warm.outputIds.length).toBe(4)
            const before = tf.memory().numTensors
            for (let round = 0; round < 20; round++) {
              // 50 generated tokens (in 5 concurrent requests), 50 optimizer steps, a weight swap.
              yield* Effect.forEach([0, 1, 2, 3, 4], (i) => generateAll(engine, request(prompt(60 + i), { maxTokens: 10, temperature: 1, seed: i })), {
                concurrency: "unbounded"
              })
              for (let s = 0; s < 50; s++) yield* Effect.promise(() => trainStep(model, opt, batches, { kind: "sft" }))
              yield* engine.setWeights(round + 2, model)
            }
            expect((yield* engine.stats).generatedTokens).toBe(4 + 1000)
            expect(tf.memory().numTensors).toBe(before)
          })
        )
        opt.dispose()
        model.dispose()
      })
    )
  })
})
