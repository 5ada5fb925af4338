/**
 * The device's training side, through real worker threads: Train raises the logprob of
 * positive-advantage actions and lowers negative ones, bumps the version (seen on generated
 * tokens, also mid-stream), keeps a caller's pause, rolls back on failure; Score; weights moved
 * to a second device; Save → Restore with optimizer state; clear errors on bad input.
 */
import { expect } from "@effect/vitest"
import {
  Device,
  type DeviceActor,
  deviceClient,
  deviceWorkerLayer,
  GenerationConfig,
  initModelDir,
  loadModelDir,
  makeConfig,
  TrainingDevice,
  trainBpe
} from "@reins/policy"
import {
  DeviceWeights,
  GenerateRequest,
  type GenerateChunk,
  RestoreRequest,
  SamplingParams,
  SaveRequest,
  ScoreRequest,
  TrainRequest,
  TrainSample,
  TrainSettings,
  WeightTensor
} from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Chunk, Context, Deferred, Effect, Fiber, Layer, Stream } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { engineSettled } from "./device-fixtures.js"
import { describeWithLayer } from "../describeWithLayer.js"

class Dirs extends Context.Tag("test/Dirs")<Dirs, { readonly root: string }>() {}

const CONTEXT = 512
const tokenizer = trainBpe("the cat sat on the mat. the dog sat on the log. <|im_start|>user\nhello<|im_end|>\n".repeat(4), { vocabSize: 300 })

/** Two devices on tiny models (d 32, 2 layers) with different seeds; no stop ids, so generations run to max tokens. */
const TestLayer = Layer.unwrapScoped(Effect.gen(function*() {
  const root = yield* Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(path.join(os.tmpdir(), "reins-device-train-"))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )
  const config = makeConfig({ vocabSize: tokenizer.vocabSize, dModel: 32, nLayers: 2, nHeads: 4, dFf: 64, contextLength: CONTEXT })
  const generationConfig = new GenerationConfig({ eosTokenIds: [], temperature: 1, topP: 1, topK: 0, maxNewTokens: 16 })
  for (const [name, seed] of [["a", 1], ["b", 2]] as const) {
    yield* initModelDir(path.join(root, name), { tokenizer, config, seed, generationConfig })
  }
  return Layer.mergeAll(
    deviceWorkerLayer({ modelDir: path.join(root, "a") }),
    deviceWorkerLayer({ modelDir: path.join(root, "b") }, TrainingDevice)
  ).pipe(Layer.provideMerge(ActorSystem.layerLocal()), Layer.merge(Layer.succeed(Dirs, { root })))
}))

const params = (maxTokens: number, temperature = 0) =>
  new SamplingParams({ maxTokens, temperature, topP: 1, topK: 0, seed: 7, stop: [], topLogprobs: 0 })

const PROMPT = Int32Array.from([5, 17, 42, 99, 120, 33, 8, 61])
const ACTION_UP = Int32Array.from([70, 71, 72, 73, 74, 75])
const ACTION_DOWN = Int32Array.from([150, 151, 152, 153, 154, 155])
const cat = (a: Int32Array, b: Int32Array) => Int32Array.from([...a, ...b])
const SEQ_UP = cat(PROMPT, ACTION_UP)
const SEQ_DOWN = cat(PROMPT, ACTION_DOWN)

const PG = { kind: "pg", clipLow: 0.2, clipHigh: 0.2, dualClip: 3, tisCap: 2 } as const

const settings = (overrides: Partial<ConstructorParameters<typeof TrainSettings>[0]> = {}) =>
  new TrainSettings({ objective: PG, lr: 3e-3, weightDecay: 0, maxGradNorm: 1, microBatchTokens: 256, maxSeqLen: 64, ...overrides })

/** A sample whose action tokens (after the prompt) are trained with `advantage`. */
const sample = (tokens: Int32Array, advantage: number, behavior: Float32Array, weight = 1 / 12) => {
  const action = (i: number) => i >= PROMPT.length
  return new TrainSample({
    tokens,
    weights: Float32Array.from(tokens, (_, i) => (action(i) ? weight : 0)),
    advantages: Float32Array.from(tokens, (_, i) => (action(i) ? advantage : 0)),
    behaviorLogprobs: Float32Array.from(behavior, (lp, i) => (action(i) ? lp : 0))
  })
}

const actionLogprob = (lp: Float32Array) => lp.subarray(PROMPT.length).reduce((s, x) => s + x, 0)

const collect = (stream: Stream.Stream<GenerateChunk, unknown>) =>
  Effect.map(Stream.runCollect(stream), (chunks) => {
    const all = Chunk.toReadonlyArray(chunks)
    return {
      ids: all.flatMap((c) => Array.from(c.outputIds)),
      versions: all.flatMap((c) => Array.from(c.versions)),
      finish: all.at(-1)?.finishReason
    }
  })

const score = (sequences: ReadonlyArray<Int32Array>, actor: DeviceActor = Device) =>
  Effect.flatMap(actor.client, (d) => d.Score(new ScoreRequest({ sequences: [...sequences] })))

/** The (on-policy) batch of the acceptance test, with behavior logprobs from the device. */
const fixedBatch = Effect.gen(function*() {
  const before = yield* score([SEQ_UP, SEQ_DOWN])
  return { before, samples: [sample(SEQ_UP, 1, before.logprobs[0]!), sample(SEQ_DOWN, -1, before.logprobs[1]!)] }
})

const isMonotone = (xs: ReadonlyArray<number>) => xs.every((x, i) => i === 0 || x >= xs[i - 1]!)

describeWithLayer("device training", TestLayer, 60_000, (it) => {
  it.effect("Score: per-token logprobs aligned with the tokens, entry 0 = 0", () =>
    Effect.gen(function*() {
      const { logprobs, version } = yield* score([SEQ_UP, Int32Array.from([3]), new Int32Array(0)])
      expect(version).toBe(0)
      expect(logprobs.map((l) => l.length)).toEqual([SEQ_UP.length, 1, 0])
      expect(logprobs[0]![0]).toBe(0)
      expect(logprobs[1]![0]).toBe(0)
      for (const lp of logprobs[0]!.subarray(1)) expect(lp < 0 && lp > -20).toBe(true)
    }))

  it.effect("Train raises positive-advantage actions, lowers negative ones, bumps the version", () =>
    Effect.gen(function*() {
      const client = yield* deviceClient(Device)
      const start = (yield* client.info).version
      const { before, samples } = yield* fixedBatch
      let version = start
      for (let update = 0; update < 3; update++) {
        // two optimizer steps per update (π_old scored before the first)
        const result = yield* client.train(new TrainRequest({ steps: [[samples[0]!, samples[1]!], [samples[0]!, samples[1]!]], settings: settings() }))
        expect(result.version).toBe(version + 1)
        version = result.version
        expect(result.steps).toHaveLength(2)
        for (const step of result.steps) {
          expect(Number.isFinite(step.loss)).toBe(true)
          expect(step.tokens).toBe(12)
          expect(step.gradNorm).toBeGreaterThan(0)
          expect(step.lr).toBeCloseTo(3e-3)
          expect(step.entropy).toBeGreaterThan(0)
          expect(step.pg).toBeDefined()
          expect(step.pg!.meanImportanceWeight).toBeGreaterThan(0)
        }
        // the first step of an update is on-policy for π_old: ratio 1, no KL yet
        expect(result.steps[0]!.pg!.meanRatio).toBeCloseTo(1, 4)
        expect(result.steps[0]!.pg!.approxKl).toBeCloseTo(0, 4)
        expect(result.steps[1]!.pg!.meanRatio).not.toBeCloseTo(1, 6)
        expect(result.seconds).toBeGreaterThan(0)
      }
      const after = yield* score([SEQ_UP, SEQ_DOWN])
      expect(after.version).toBe(start + 3)
      expect(actionLogprob(after.logprobs[0]!)).toBeGreaterThan(actionLogprob(before.logprobs[0]!) + 0.5)
      expect(actionLogprob(after.logprobs[1]!)).toBeLessThan(actionLogprob(before.logprobs[1]!) - 0.5)

      // generated tokens carry the new version, and Info reports it
      const out = yield* collect(client.generate(new GenerateRequest({ requestId: "after-train", promptIds: PROMPT, params: params(5) })))
      expect(out.versions).toEqual([start + 3, start + 3, start + 3, start + 3, start + 3])
      expect((yield* client.info).version).toBe(start + 3)
    }))

  it.effect("Train while generating interrupts the stream for the swap; it continues with the new version", () =>
    Effect.gen(function*() {
      const device = yield* Device.client
      const start = (yield* device.Info()).version
      const { samples } = yield* fixedBatch
      const maxTokens = CONTEXT - PROMPT.length
      const stream = device.Generate(new GenerateRequest({ requestId: "long", promptIds: PROMPT, params: params(maxTokens, 1) }))
      // Train as soon as the first tokens arrive: hundreds are left to sample
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(collect(Stream.tap(stream, () => Deferred.succeed(started, undefined))))
      yield* Deferred.await(started)
      const result = yield* device.Train(new TrainRequest({ steps: [samples], settings: settings({ objective: { kind: "sft" } }) }))
      const out = yield* Fiber.join(fiber)
      expect(result.version).toBe(start + 1)
      expect(result.steps[0]!.pg).toBeUndefined()
      expect(out.finish).toBe("length")
      expect(out.ids).toHaveLength(maxTokens)
      expect(isMonotone(out.versions)).toBe(true)
      expect(out.versions[0]).toBe(start)
      expect(out.versions.at(-1)).toBe(start + 1)
    }))

  it.effect("Train on a device the caller paused keeps it paused until Resume", () =>
    Effect.gen(function*() {
      const device = yield* Device.client
      const start = (yield* device.Info()).version
      const { samples } = yield* fixedBatch
      yield* device.Pause({ mode: "interrupt" })
      const atPause = (yield* device.Info()).engine
      const held = yield* Effect.fork(collect(device.Generate(new GenerateRequest({ requestId: "held", promptIds: PROMPT, params: params(4) }))))
      const result = yield* device.Train(new TrainRequest({ steps: [samples], settings: settings() }))
      expect(result.version).toBe(start + 1)
      // Still paused, as a state: the engine has seen the request and the new weights, and is
      // parked with the request queued. A swap that resumed the device would show its tokens.
      const engine = yield* engineSettled(device, atPause.generatedTokens)
      expect(engine).toMatchObject({ waiting: 1, running: 0, steps: atPause.steps, generatedTokens: atPause.generatedTokens })
      expect(held.unsafePoll()).toBeNull()
      yield* device.Resume()
      const out = yield* Fiber.join(held)
      expect(out.versions).toEqual([start + 1, start + 1, start + 1, start + 1])
    }))

  it.effect("a failed Train changes nothing and leaves the engine serving", () =>
    Effect.gen(function*() {
      const device = yield* Device.client
      const start = (yield* device.Info()).version
      const { before, samples } = yield* fixedBatch
      // step 0 trains fine; step 1's huge advantages overflow the gradient norm → the update fails
      const huge = sample(SEQ_UP, 3e38, before.logprobs[0]!)
      const error = yield* Effect.flip(device.Train(new TrainRequest({ steps: [samples, [huge]], settings: settings() })))
      expect(error._tag).toBe("DeviceError")
      expect(error.message).toMatch(/step 1 failed: .*gradient norm/)
      const after = yield* score([SEQ_UP, SEQ_DOWN])
      expect(after.version).toBe(start)
      expect(Array.from(after.logprobs[0]!)).toEqual(Array.from(before.logprobs[0]!))
      expect(Array.from(after.logprobs[1]!)).toEqual(Array.from(before.logprobs[1]!))
      const out = yield* collect(device.Generate(new GenerateRequest({ requestId: "after-fail", promptIds: PROMPT, params: params(3) })))
      expect(out.versions).toEqual([start, start, start])
    }))

  it.effect("a Train whose caller goes away mid-update stops at its step's end and changes nothing, then or later", () =>
    Effect.gen(function*() {
      const device = yield* Device.client
      const start = (yield* device.Info()).version
      const { before, samples } = yield* fixedBatch
      const train = yield* Effect.fork(device.Train(new TrainRequest({ steps: Array.from({ length: 2000 }, () => samples), settings: settings({ objective: { kind: "sft" } }) })))
      // Interrupted while it trains, through the worker's RPC. On wasm a step never lets the event
      // loop run, so the interruption lands between steps; on WebGPU it lands mid-step
      // (device-every-backend.test.ts holds that case).
      yield* Effect.sleep("400 millis")
      expect((yield* device.Info()).version).toBe(start)
      yield* Fiber.interrupt(train)
      // a step left running after the rollback would change the weights once it ends: give it time to
      yield* Effect.sleep("1 second")
      const after = yield* score([SEQ_UP, SEQ_DOWN])
      expect(after.version).toBe(start)
      expect(Array.from(after.logprobs[0]!)).toEqual(Array.from(before.logprobs[0]!))
      expect(Array.from(after.logprobs[1]!)).toEqual(Array.from(before.logprobs[1]!))
      // and the next Train starts from there
      const next = yield* device.Train(new TrainRequest({ steps: [samples], settings: settings() }))
      expect(next.version).toBe(start + 1)
    }))

  it.effect("GetWeights → SetWeights moves a version to another device: both score and sample alike", () =>
    Effect.gen(function*() {
      const source = yield* deviceClient(Device)
      const target = yield* deviceClient(TrainingDevice)
      const differs = yield* Effect.all([score([SEQ_UP]), score([SEQ_UP], TrainingDevice)])
      expect(Array.from(differs[0].logprobs[0]!)).not.toEqual(Array.from(differs[1].logprobs[0]!))

      const weights = yield* source.getWeights
      expect(weights.version).toBe((yield* source.info).version)
      expect(weights.tensors.map((t) => t.name)).toContain("tok_embeddings.weight")
      yield* target.setWeights(weights)
      expect((yield* target.info).version).toBe(weights.version)
      const [a, b] = yield* Effect.all([score([SEQ_UP, SEQ_DOWN]), score([SEQ_UP, SEQ_DOWN], TrainingDevice)])
      expect(b.version).toBe(a.version)
      expect(Array.from(b.logprobs[0]!)).toEqual(Array.from(a.logprobs[0]!))
      expect(Array.from(b.logprobs[1]!)).toEqual(Array.from(a.logprobs[1]!))
      const request = (id: string) => new GenerateRequest({ requestId: id, promptIds: PROMPT, params: params(8) })
      const [ga, gb] = yield* Effect.all([collect(source.generate(request("ga"))), collect(target.generate(request("gb")))])
      expect(gb.ids).toEqual(ga.ids)
      expect(gb.versions).toEqual(ga.versions)
    }))

  it.effect("Save → Restore: a loadable model dir, identical scores, optimizer state restored", () =>
    Effect.gen(function*() {
      const { root } = yield* Dirs
      const device = yield* Device.client
      const { samples } = yield* fixedBatch
      const train = device.Train(new TrainRequest({ steps: [samples], settings: settings() }))
      const dir = path.join(root, "checkpoints", "v-a")
      const bare = path.join(root, "checkpoints", "v-a-no-optimizer")

      const saved = yield* device.Save(new SaveRequest({ dir, optimizer: true }))
      expect(saved).toMatchObject({ dir, optimizer: true })
      yield* device.Save(new SaveRequest({ dir: bare, optimizer: false }))
      expect(readdirSync(path.join(root, "checkpoints")).sort()).toEqual(["v-a", "v-a-no-optimizer"]) // no temp dirs left
      expect(existsSync(path.join(dir, "optimizer.safetensors"))).toBe(true)
      expect(existsSync(path.join(bare, "optimizer.safetensors"))).toBe(false)
      const loaded = yield* loadModelDir(dir)
      expect(loaded.config.version).toBe(saved.version)
      const atSave = yield* score([SEQ_UP, SEQ_DOWN])

      // train → P1; restore with optimizer state → train → identical P1
      yield* train
      const p1 = yield* score([SEQ_UP, SEQ_DOWN])
      const restored = yield* device.Restore(new RestoreRequest({ dir }))
      expect(restored).toMatchObject({ version: saved.version, optimizer: true })
      const back = yield* score([SEQ_UP, SEQ_DOWN])
      expect(back.version).toBe(saved.version)
      expect(Array.from(back.logprobs[0]!)).toEqual(Array.from(atSave.logprobs[0]!))
      yield* train
      const p2 = yield* score([SEQ_UP, SEQ_DOWN])
      expect(Array.from(p2.logprobs[0]!)).toEqual(Array.from(p1.logprobs[0]!))

      // without optimizer state the moments start fresh: the same update lands elsewhere
      const fresh = yield* device.Restore(new RestoreRequest({ dir: bare, version: 100 }))
      expect(fresh).toMatchObject({ version: 100, optimizer: false })
      yield* train
      const p3 = yield* score([SEQ_UP, SEQ_DOWN])
      expect(p3.version).toBe(101)
      expect(Array.from(p3.logprobs[0]!)).not.toEqual(Array.from(p1.logprobs[0]!))

      // saving over an existing checkpoint replaces it, and clears what a killed save of it left
      mkdirSync(path.join(root, "checkpoints", ".v-a.partial-killed"))
      const again = yield* device.Save(new SaveRequest({ dir, optimizer: true }))
      expect(again.version).toBe(101)
      expect((yield* loadModelDir(dir)).config.version).toBe(101)
      expect(readdirSync(path.join(root, "checkpoints")).sort()).toEqual(["v-a", "v-a-no-optimizer"])
    }))

  it.effect("bad input: clear DeviceErrors, nothing changes", () =>
    Effect.gen(function*() {
      const { root } = yield* Dirs
      const device = yield* Device.client
      const before = yield* score([SEQ_UP])
      const { samples } = yield* fixedBatch
      const trainError = (steps: ConstructorParameters<typeof TrainRequest>[0]["steps"], s = settings()) =>
        Effect.map(Effect.flip(device.Train(new TrainRequest({ steps, settings: s }))), (e) => `${e._tag}: ${e.message}`)

      const long = new TrainSample({ tokens: new Int32Array(80).fill(5), weights: new Float32Array(80).fill(0.1), advantages: new Float32Array(80), behaviorLogprobs: new Float32Array(80) })
      expect(yield* trainError([[...samples, long]])).toMatch(/^DeviceError: Train: step 0, sample 2 has 80 tokens \(79 predictions\), more than maxSeqLen 64/)
      expect(yield* trainError([samples], settings({ maxSeqLen: 1024 }))).toMatch(/maxSeqLen 1024 is more than the model's context of 512/)
      expect(yield* trainError([])).toMatch(/no steps/)
      expect(yield* trainError([[]])).toMatch(/step 0 has no samples/)
      const outside = new TrainSample({ ...samples[0]!, tokens: Int32Array.from(SEQ_UP, (t, i) => (i === 3 ? 5000 : t)) })
      expect(yield* trainError([[outside]])).toMatch(`token id 5000 at position 3 is outside the vocabulary of ${tokenizer.vocabSize}`)
      const noAdvantages = new TrainSample({ tokens: SEQ_UP, weights: samples[0]!.weights })
      expect(yield* trainError([[noAdvantages]])).toMatch(/the pg objective needs advantages and behaviorLogprobs/)
      const misaligned = new TrainSample({ ...samples[0]!, weights: new Float32Array(3) })
      expect(yield* trainError([[misaligned]])).toMatch(/weights has 3 entries for 14 tokens/)

      const weights = yield* device.GetWeights()
      const setError = (tensors: ReadonlyArray<WeightTensor>) =>
        Effect.map(Effect.flip(device.SetWeights(new DeviceWeights({ version: 50, tensors: [...tensors] }))), (e) => e.message)
      const [first, ...rest] = weights.tensors
      expect(yield* setError(rest)).toMatch(/tensor tok_embeddings.weight is missing/)
      expect(yield* setError([new WeightTensor({ ...first!, name: "nope" }), ...rest])).toMatch(/unknown tensor nope/)
      expect(yield* setError([new WeightTensor({ ...first!, shape: [first!.shape[1]!, first!.shape[0]!] }), ...rest])).toMatch(
        `tok_embeddings.weight has shape [32, ${tokenizer.vocabSize}], the model needs [${tokenizer.vocabSize}, 32]`
      )

      const restoreError = yield* Effect.flip(device.Restore(new RestoreRequest({ dir: path.join(root, "missing") })))
      expect(restoreError.message).toMatch(/^Restore: .*config.json/)
      const scoreError = yield* Effect.flip(device.Score(new ScoreRequest({ sequences: [Int32Array.from([1, -2])] })))
      expect(scoreError.message).toMatch(/Score: sequence 0: token id -2 at position 1 is outside the vocabulary/)

      const after = yield* score([SEQ_UP])
      expect(after.version).toBe(before.version)
      expect(Array.from(after.logprobs[0]!)).toEqual(Array.from(before.logprobs[0]!))
    }))

  it.effect("Info: cumulative generating and training seconds", () =>
    Effect.gen(function*() {
      const info = yield* Effect.flatMap(Device.client, (d) => d.Info())
      expect(info.trainingSeconds).toBeGreaterThan(0)
      expect(info.generatingSeconds).toBeGreaterThan(0)
      expect(info.generatingSeconds + info.trainingSeconds).toBeLessThanOrEqual(info.uptimeSeconds + 1e-6)
      const other = yield* Effect.flatMap(TrainingDevice.client, (d) => d.Info())
      expect(other.trainingSeconds).toBe(0)
    }))

  it.effect("a Train that sets no micro-batch size gets the device's own, from its backend's memory", () =>
    Effect.gen(function*() {
      const client = yield* deviceClient(Device)
      const info = yield* client.info
      // wasm: its 4 GiB heap holds far more of this tiny model, but more than 4096 tokens is no faster there
      expect(info.backend).toBe("wasm")
      expect(info.memoryBytes).toBe(4 * 1024 ** 3)
      expect(info.microBatchTokens).toBe(4096)
      const { samples } = yield* fixedBatch
      // lr 0: the weights stay as they are for nothing but the packing to differ
      const own = yield* client.train(new TrainRequest({ steps: [samples], settings: settings({ lr: 0, microBatchTokens: undefined }) }))
      const given = yield* client.train(new TrainRequest({ steps: [samples], settings: settings({ lr: 0, microBatchTokens: 16, maxSeqLen: 16 }) }))
      expect(own.steps[0]!.microBatches).toBe(1)
      expect(given.steps[0]!.microBatches).toBe(2)
      // the losses are weighted sums, so packing changes nothing else
      expect(given.steps[0]!.loss).toBeCloseTo(own.steps[0]!.loss, 5)
      expect(given.steps[0]!.gradNorm).toBeCloseTo(own.steps[0]!.gradNorm, 4)
    }))
})
