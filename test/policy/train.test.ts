/**
 * Training primitives: packing keeps every per-token array aligned; gradient accumulation over
 * micro-batches equals one big batch; SFT on a tiny corpus lowers the loss and greedy generation
 * then reproduces it; the policy-gradient loss raises the logprob of positive-advantage tokens
 * and lowers negative ones; PPO clip, dual clip and truncated importance weights do what they
 * say; AdamW clips by global norm and follows its schedule.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  AdamW,
  DEFAULT_PG,
  generateAll,
  makeEngine,
  microBatchGradients,
  packSequences,
  PackingError,
  schedule,
  scoreSequences,
  trainStep,
  Transformer,
  type TrainingSequence
} from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import * as tf from "@tensorflow/tfjs"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { beforeAll } from "vitest"
import { backend, maxAbsDiff, tinyConfig, tinyTokenizer } from "./model-fixtures.js"

beforeAll(() => backend())

const seq = (tokens: ArrayLike<number>, extra: Partial<TrainingSequence> = {}): TrainingSequence => ({
  tokens: Int32Array.from(tokens),
  weights: new Float32Array(tokens.length).fill(1),
  ...extra
})

const mean = (xs: ArrayLike<number>, from = 1) => {
  let s = 0
  for (let i = from; i < xs.length; i++) s += xs[i]!
  return s / (xs.length - from)
}

describe("packing", () => {
  it("places predictions, targets, weights and advantages aligned with their token", () => {
    const a = seq([5, 6, 7, 8], { advantages: Float32Array.of(0, 1, 2, 3), behaviorLogprobs: Float32Array.of(0, -1, -2, -3), weights: Float32Array.of(9, 0.1, 0.2, 0.3) })
    const b = seq([1, 2, 3], { advantages: Float32Array.of(0, 4, 5), behaviorLogprobs: Float32Array.of(0, -4, -5) })
    const [mb] = packSequences([a, b], { maxTokens: 64, maxSeqLen: 8 })
    expect(mb!.rows).toBe(1)
    expect(mb!.seqLen).toBe(8)
    expect([...mb!.inputIds.subarray(0, 5)]).toEqual([5, 6, 7, 1, 2])
    expect([...mb!.targets.subarray(0, 5)]).toEqual([6, 7, 8, 2, 3])
    expect([...mb!.positions.subarray(0, 5)]).toEqual([0, 1, 2, 0, 1])
    expect([...mb!.segments]).toEqual([0, 0, 0, 1, 1, -1, -1, -1])
    expect([...mb!.weights]).toEqual([...Float32Array.of(0.1, 0.2, 0.3, 1, 1, 0, 0, 0)])
    expect([...mb!.advantages.subarray(0, 5)]).toEqual([1, 2, 3, 4, 5])
    expect([...mb!.behaviorLogprobs.subarray(0, 5)]).toEqual([-1, -2, -3, -4, -5])
    expect(mb!.oldLogprobs).toBeUndefined()
    expect(mb!.hasPolicyGradientInputs).toBe(true)
    expect(mb!.trainedTokens).toBe(5)
    expect(mb!.placements).toEqual([
      { sequence: 0, offset: 0, length: 3 },
      { sequence: 1, offset: 3, length: 2 }
    ])
  })

  it("respects the token budget, one sequence per row without packing, and rejects what cannot fit", async () => {
    const seqs = Array.from({ length: 10 }, (_, i) => seq(Array.from({ length: 5 + i }, (_, j) => j)))
    const batches = packSequences(seqs, { maxTokens: 32, maxSeqLen: 16, pack: false })
    expect(batches.reduce((n, b) => n + b.rows, 0)).toBe(10)
    for (const b of batches) expect(b.rows * b.seqLen).toBeLessThanOrEqual(32)
    // Packed (several sequences a row, as the device packs a Train step): still within the budget, each sequence once.
    const packed = packSequences(seqs, { maxTokens: 32, maxSeqLen: 16 })
    for (const b of packed) expect(b.rows * b.seqLen).toBeLessThanOrEqual(32)
    expect(packed.flatMap((b) => b.placements.map((p) => p.sequence)).sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(() => packSequences([seq(Array.from({ length: 20 }, () => 1))], { maxTokens: 64, maxSeqLen: 16 })).toThrow(PackingError)
    expect(() => packSequences([seq([1, 2, 3], { advantages: new Float32Array(2) })], { maxTokens: 64, maxSeqLen: 16 })).toThrow(/advantages has 2 entries/)
    // The PG loss refuses rows without advantages or behavior logprobs rather than guessing.
    const model = Transformer.init(tinyConfig(16), 1)
    const [sftOnly] = packSequences([seq([1, 2, 3])], { maxTokens: 64, maxSeqLen: 16 })
    expect(sftOnly!.hasPolicyGradientInputs).toBe(false)
    await expect(microBatchGradients(model, sftOnly!, { kind: "pg", ...DEFAULT_PG })).rejects.toThrow(/needs advantages and behaviorLogprobs/)
    model.dispose()
  })
})

describe("gradients", () => {
  it("accumulating micro-batches equals one batch", async () => {
    const model = Transformer.init(tinyConfig(50), 1)
    const seqs = Array.from({ length: 6 }, (_, i) => seq(Array.from({ length: 6 + i }, (_, j) => (i * 7 + j * 3) % 50)))
    const sum = async (batches: ReturnType<typeof packSequences>) => {
      let acc: Map<string, tf.Tensor> | undefined
      for (const b of batches) {
        const { grads } = await microBatchGradients(model, b, { kind: "sft" })
        if (acc === undefined) acc = grads
        else for (const [n, g] of grads) acc.set(n, tf.add(acc.get(n)!, g))
      }
      return acc!
    }
    const whole = await sum(packSequences(seqs, { maxTokens: 1024, maxSeqLen: 32 }))
    const pieces = packSequences(seqs, { maxTokens: 16, maxSeqLen: 16, pack: false })
    expect(pieces.length).toBeGreaterThan(2)
    const split = await sum(pieces)
    for (const [n, g] of whole) expect(maxAbsDiff(g.dataSync(), split.get(n)!.dataSync())).toBeLessThan(1e-5)
    tf.dispose([...whole.values(), ...split.values()])
    model.dispose()
  })
})

describe("SFT", () => {
  it.effect("a few steps on a tiny corpus lower the loss, then greedy generation reproduces it", () =>
    Effect.gen(function* () {
      const tok = tinyTokenizer()
      const text = "the cat sat on the mat. the dog sat on the log."
      const ids = tok.encode(text)
      const model = Transformer.init(tinyConfig(tok.vocabSize), 0)
      const opt = new AdamW(model.params, { lr: schedule({ peak: 1e-2, warmupSteps: 5 }), maxGradNorm: 1 })
      const w = new Float32Array(ids.length).fill(1 / (ids.length - 1))
      const batches = packSequences([{ tokens: ids, weights: w }], { maxTokens: 256, maxSeqLen: 64 })
      const losses: Array<number> = []
      for (let i = 0; i < 80; i++) losses.push((yield* Effect.promise(() => trainStep(model, opt, batches, { kind: "sft" }))).loss)
      expect(losses[0]).toBeGreaterThan(4)
      expect(losses[losses.length - 1]!).toBeLessThan(0.1)
      expect(losses[losses.length - 1]!).toBeLessThan(losses[0]! / 20)

      const prompt = ids.subarray(0, 3)
      const out = yield* Effect.scoped(
        Effect.gen(function* () {
          const engine = yield* makeEngine({ model, tokenizer: tok })
          return yield* generateAll(
            engine,
            new GenerateRequest({
              requestId: "sft",
              promptIds: prompt,
              params: new SamplingParams({ maxTokens: ids.length - 3, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0 })
            })
          )
        })
      )
      expect(tok.decode(prompt) + tok.decode(out.outputIds)).toBe(text)
      expect(out.finishReason).toBe("length")
      opt.dispose()
      model.dispose()
    })
  )
})

describe("policy gradient", () => {
  const sample = (model: Transformer, seed: number) =>
    Effect.scoped(
      Effect.gen(function* () {
        const engine = yield* makeEngine({ model })
        const prompt = Int32Array.of(1, 2, 3)
        const g = yield* generateAll(
          engine,
          new GenerateRequest({ requestId: `s${seed}`, promptIds: prompt, params: new SamplingParams({ maxTokens: 12, temperature: 1, topP: 1, topK: 0, seed, stop: [], topLogprobs: 0 }) })
        )
        const tokens = Int32Array.from([...prompt, ...g.outputIds])
        const mask = Float32Array.from(tokens, (_, i) => (i >= prompt.length ? 1 : 0))
        const behavior = new Float32Array(tokens.length)
        behavior.set(g.logprobs, prompt.length)
        return { tokens, mask, behavior }
      })
    )

  const actionLogprob = (model: Transformer, s: TrainingSequence, mask: Float32Array) =>
    Effect.promise(async () => {
      const [lp] = await scoreSequences(model, [s], { maxTokens: 256, maxSeqLen: 64 })
      let sum = 0
      let n = 0
      for (let i = 1; i < lp!.length; i++) if (mask[i] === 1) (sum += lp![i]!, n++)
      return sum / n
    })

  it.effect.each([1, -1])("advantage %d moves the sampled tokens' logprob that way", (sign) =>
    Effect.gen(function* () {
      const model = Transformer.init(tinyConfig(40), 5)
      const { tokens, mask, behavior } = yield* sample(model, 17)
      const s: TrainingSequence = {
        tokens,
        weights: Float32Array.from(mask, (m) => m / 12),
        advantages: Float32Array.from(mask, (m) => m * sign),
        behaviorLogprobs: behavior
      }
      // The engine's logprobs are the model's: the first update is exactly on-policy.
      const before = yield* actionLogprob(model, s, mask)
      expect(Math.abs(before - mean(behavior.subarray(3), 0))).toBeLessThan(1e-4)
      const opt = new AdamW(model.params, { lr: 3e-3 })
      const batches = packSequences([s], { maxTokens: 256, maxSeqLen: 64 })
      const first = yield* Effect.promise(() => trainStep(model, opt, batches, { kind: "pg", ...DEFAULT_PG }))
      expect(first.pg!.meanRatio).toBeCloseTo(1, 6)
      expect(first.pg!.clipFraction).toBe(0)
      expect(first.pg!.meanImportanceWeight).toBeCloseTo(1, 4)
      expect(first.tokens).toBe(12)
      for (let i = 0; i < 4; i++) yield* Effect.promise(() => trainStep(model, opt, batches, { kind: "pg", ...DEFAULT_PG }))
      const after = yield* actionLogprob(model, s, mask)
      expect(sign * (after - before)).toBeGreaterThan(0.05)
      opt.dispose()
      model.dispose()
    })
  )

  it.effect("PPO clip and dual clip stop the gradient; truncated importance weights are capped", () =>
    Effect.gen(function* () {
      const model = Transformer.init(tinyConfig(40), 6)
      const { tokens, mask, behavior } = yield* sample(model, 3)
      const [current] = yield* Effect.promise(() => scoreSequences(model, [{ tokens, weights: mask }], { maxTokens: 256, maxSeqLen: 64 }))
      const gradNorm = (s: TrainingSequence) =>
        Effect.promise(async () => {
          const [b] = packSequences([s], { maxTokens: 256, maxSeqLen: 64 })
          const r = await microBatchGradients(model, b!, { kind: "pg", ...DEFAULT_PG })
          const norm = await AdamW.globalNorm(r.grads)
          tf.dispose([...r.grads.values()])
          return { norm, pg: r.pg! }
        })
      const base = { tokens, weights: mask, behaviorLogprobs: behavior }
      // π/π_old = e ≫ 1 + clip with A > 0: clipped, no gradient.
      const up = yield* gradNorm({ ...base, advantages: mask, oldLogprobs: Float32Array.from(current!, (x) => x - 1) })
      expect(up.pg.clipFraction).toBe(1)
      expect(up.norm).toBe(0)
      // π/π_old = e² > dual clip 3 with A < 0: dual-clipped, no gradient.
      const down = yield* gradNorm({ ...base, advantages: Float32Array.from(mask, (m) => -m), oldLogprobs: Float32Array.from(current!, (x) => x - 2) })
      expect(down.pg.dualClipFraction).toBe(1)
      expect(down.norm).toBe(0)
      // Same ratio, A < 0 but below the dual clip (ratio 1.5): gradient flows.
      const flows = yield* gradNorm({ ...base, advantages: Float32Array.from(mask, (m) => -m), oldLogprobs: Float32Array.from(current!, (x) => x - Math.log(1.5)) })
      expect(flows.pg.dualClipFraction).toBe(0)
      expect(flows.norm).toBeGreaterThan(0)
      // A token the behavior policy found 100x less likely than π_old: weight capped at tis_cap.
      const stale = yield* gradNorm({ ...base, advantages: mask, behaviorLogprobs: Float32Array.from(current!, (x) => x - Math.log(100)) })
      expect(stale.pg.meanImportanceWeight).toBeCloseTo(DEFAULT_PG.tisCap, 5)
      expect(stale.pg.truncatedFraction).toBe(1)
      model.dispose()
    })
  )
})

describe("AdamW", () => {
  it("clips by global norm and follows its schedule", async () => {
    const lr = schedule({ peak: 1, warmupSteps: 4, kind: "cosine", totalSteps: 14, minRatio: 0.1 })
    expect([0, 1, 2, 3].map(lr)).toEqual([0.25, 0.5, 0.75, 1])
    expect(lr(4)).toBeCloseTo(1, 10)
    expect(lr(9)).toBeCloseTo(0.55, 10)
    expect(lr(14)).toBeCloseTo(0.1, 10)
    expect(lr(100)).toBeCloseTo(0.1, 10)
    expect(schedule({ peak: 0.5 })(1000)).toBe(0.5)

    const p = tf.variable(tf.tensor1d([1, 1]))
    const opt = new AdamW(new Map([["p", p]]), { lr: 0.1, maxGradNorm: 1 })
    const g = tf.tensor1d([30, 40])
    const stats = await opt.apply(new Map([["p", g]]))
    expect(stats.gradNorm).toBeCloseTo(50, 4)
    expect(stats.clipped).toBe(true)
    expect(stats.step).toBe(1)
    // First Adam step moves every coordinate by lr·sign(g), whatever the clipping scale.
    expect(maxAbsDiff(p.dataSync(), [0.9, 0.9])).toBeLessThan(1e-5)
    await expect(opt.apply(new Map())).rejects.toThrow(/no gradient for p/)
    tf.dispose([p, g])
    opt.dispose()
  })
})

describe("a backend that cannot read synchronously (WebGPU in Node)", () => {
  it("scores and trains (SFT and PG) with every read asynchronous", () => {
    const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url))
    const child = spawnSync(process.execPath, ["--import", "tsx", "--import", fixture("forbid-sync-reads.mjs"), fixture("no-sync-reads.ts")], {
      env: { ...process.env },
      encoding: "utf8",
      timeout: 120_000
    })
    expect(child.status, child.stderr).toBe(0)
    const r = JSON.parse(child.stdout.trim().split("\n").pop()!)
    expect(r.scored).toEqual([20, 21, 22])
    expect(r.sft.loss).toBeGreaterThan(0)
    expect(r.sft.entropy).toBeGreaterThan(0)
    expect(r.sft.gradNorm).toBeGreaterThan(0)
    expect(r.sft.tokens).toBe(12 + 13 + 14)
    expect(r.pg.tokens).toBe(12 + 13 + 14)
    // scored, then trained on the same weights: exactly on-policy
    expect(r.pg.meanRatio).toBeCloseTo(1, 5)
    expect(Number.isFinite(r.pg.approxKl)).toBe(true)
  }, 150_000)
})
