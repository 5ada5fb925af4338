/**
 * Supervised fine-tuning of a policy on demonstration transcripts: the loop `reins sft` runs.
 *
 * Without `init` it builds a new policy: a byte-level BPE learned from the rendered demos (digits
 * stay single tokens), the compact chat template (or `template`), and a freshly initialised small
 * transformer. With `init` it continues from that model directory. Each demo becomes one sequence
 * with loss on exactly the assistant tokens (as the Gateway would have recorded them); training is
 * token-normalized cross-entropy with AdamW and warmup + cosine decay. Progress goes to
 * `Console.error`; the model directory is written to a temporary sibling and renamed into place,
 * with `sft.json` recording how it was made. Same settings and seed → same bytes.
 *
 * `@reins/policy` (TensorFlow.js) is imported only when a run starts, so importing the trainer
 * stays cheap for everything else.
 */
import type { CheckpointError, ModelDir, Transformer } from "@reins/policy"
import type { ChatTemplate, Tokenizer } from "@reins/policy/text"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { type DemoError, type DemoLine, readDemos } from "./demos.js"
import { planSteps, tokenNormalized } from "./plan.js"
import { buildSequences, type SftSequence } from "./sequences.js"
import { compactChatTemplate } from "./template.js"
import { trainDemoTokenizer } from "./tokenizer.js"

export class SftError extends Data.TaggedError("SftError")<{ readonly message: string }> {}

/** What to train, already checked (see `reins sft`'s options). */
export interface SftSettings {
  readonly demos: string
  /** Absolute path of the model directory to write. */
  readonly out: string
  /** Continue from this model directory instead of building a new policy. */
  readonly init: string | undefined
  /** The new policy's shape (ignored with `init`). */
  readonly arch: { readonly vocab: number; readonly layers: number; readonly dim: number; readonly heads: number; readonly context: number }
  /** A chat template file for the new policy instead of the compact one. */
  readonly template: string | undefined
  /** Exactly this many optimizer steps; otherwise `epochs` passes. */
  readonly steps: number | undefined
  readonly epochs: number
  readonly batch: number
  /** Peak learning rate. */
  readonly lr: number
  readonly seed: number
  readonly skipInvalid: boolean
  /** How the run was asked for, recorded in `sft.json`. */
  readonly command: ReadonlyArray<string>
}

/** What a finished run did. */
export interface SftResult {
  readonly out: string
  readonly steps: number
  readonly seconds: number
  /** CPU time of the loop (on a shared machine, wall time alone overstates the cost). */
  readonly cpuSeconds: number
  readonly tokens: number
  readonly losses: ReadonlyArray<number>
  /** Mean loss over the first and the last few steps (a quarter of the run, at most 10). */
  readonly startLoss: number
  readonly endLoss: number
}

type Policy = typeof import("@reins/policy")
const loadPolicy = Effect.promise(() => import("@reins/policy"))

const io = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (e) => new SftError({ message: `${what}: ${(e as Error).message}` }) })

/** `out` must be absent, an empty directory, or a model directory (never someone's other files). */
const checkOut = (out: string) =>
  io(`cannot inspect ${out}`, async () => {
    const stat = await fs.stat(out).catch((e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? undefined : Promise.reject(e)))
    if (stat === undefined) return undefined
    if (!stat.isDirectory()) return `--out ${out} exists and is not a directory`
    const entries = await fs.readdir(out)
    return entries.length === 0 || entries.includes("config.json") ? undefined : `--out ${out} is a non-empty directory without a model (config.json); refusing to replace it`
  }).pipe(Effect.flatMap((problem) => (problem === undefined ? Effect.void : Effect.fail(new SftError({ message: problem })))))

/** The policy training starts from: a model directory, or a new tokenizer + template + config. */
const startingPolicy = (policy: Policy, s: SftSettings, demoLines: ReadonlyArray<DemoLine>) =>
  Effect.gen(function*() {
    if (s.init !== undefined) {
      const dir = yield* policy.loadModelDir(s.init)
      const chatTemplate = dir.chatTemplate
      // Demos are laid out by ChatTemplate's turn rule (sequences.ts), which a Hugging Face template need not follow.
      if (!(chatTemplate instanceof policy.ChatTemplate)) {
        return yield* new SftError({ message: `--init ${s.init}: reins sft lays demos out with reins's own chat template; this model has a Hugging Face one` })
      }
      return { ...dir, chatTemplate, version: dir.config.version + 1, fresh: false }
    }
    const template: ChatTemplate = s.template === undefined
      ? compactChatTemplate()
      : yield* io(`cannot read --template ${s.template}`, () => fs.readFile(s.template!, "utf8")).pipe(
        Effect.flatMap((source) => Effect.try({ try: () => policy.ChatTemplate.fromString(source), catch: (e) => new SftError({ message: `--template ${s.template}: ${(e as Error).message}` }) }))
      )
    const started = performance.now()
    const tokenizer: Tokenizer = yield* Effect.try({
      try: () => trainDemoTokenizer(demoLines.map((d) => d.demo), template, { vocabSize: s.arch.vocab }),
      catch: (e) => new SftError({ message: `tokenizer training failed: ${(e as Error).message}` })
    })
    yield* Console.error(`tokenizer: ${tokenizer.vocabSize} tokens learned from the demos in ${((performance.now() - started) / 1000).toFixed(1)} s (digits stay single tokens)`)
    const config = yield* Effect.try({
      try: () => policy.makeConfig({ vocabSize: tokenizer.vocabSize, dModel: s.arch.dim, nLayers: s.arch.layers, nHeads: s.arch.heads, contextLength: s.arch.context }),
      catch: (e) => new SftError({ message: `invalid model shape: ${(e as Error).message}` })
    })
    const weights = policy.initWeights(config, s.seed)
    return { config, weights, tokenizer, chatTemplate: template, generationConfig: policy.GenerationConfig.forTokenizer(tokenizer), version: 0, fresh: true }
  })

type Start = Effect.Effect.Success<ReturnType<typeof startingPolicy>>

/** Demos → sequences (reporting what was dropped) and the step plan. */
const trainingData = (s: SftSettings, demoLines: ReadonlyArray<DemoLine>, start: Start) =>
  Effect.gen(function*() {
    const context = start.config.contextLength
    const built = yield* Effect.try({
      try: () => buildSequences({ tokenizer: start.tokenizer, template: start.chatTemplate }, demoLines, context),
      catch: (e) => new SftError({ message: `cannot build training sequences: ${(e as Error).message}` })
    })
    const tooLong = built.dropped.filter((d) => d.reason === "too-long").length
    const unrenderable = built.dropped.find((d) => d.reason === "template")
    if (tooLong > 0) yield* Console.error(`dropped ${tooLong} of ${demoLines.length} demos longer than the context of ${context} tokens`)
    if (unrenderable !== undefined) {
      yield* Console.error(`dropped ${built.dropped.length - tooLong} demos the chat template cannot render (first: line ${unrenderable.line}: ${unrenderable.message})`)
    }
    const count = built.sequences.length
    if (count === 0) return yield* new SftError({ message: `nothing to train on: ${unrenderable?.message ?? `no demo fits the context of ${context} tokens`}` })
    const plan = planSteps({ count, batchSize: s.batch, steps: s.steps, epochs: s.epochs, seed: s.seed + 1 })
    const tokens = built.sequences.reduce((n, q) => n + q.tokens.length, 0)
    const longest = built.sequences.reduce((m, q) => Math.max(m, q.tokens.length), 0)
    const trained = built.sequences.reduce((n, q) => n + q.assistantTokens, 0)
    yield* Console.error(
      `${count} sequences, ${tokens} tokens (mean ${(tokens / count).toFixed(1)}, max ${longest}), ${trained} trained; ${plan.length} steps of ${s.batch} (${((plan.length * s.batch) / count).toFixed(2)} epochs)`
    )
    return { built, plan }
  })

/** The optimizer loop; logs step, loss, learning rate and speed. */
const trainLoop = (
  policy: Policy,
  model: Transformer,
  sequences: ReadonlyArray<SftSequence>,
  plan: ReadonlyArray<Int32Array>,
  lr: number,
  microBatchTokens: number
) =>
  Effect.gen(function*() {
    const total = plan.length
    const warmupSteps = Math.min(50, Math.ceil(total / 10))
    const optimizer = new policy.AdamW(model.params, {
      lr: policy.schedule({ peak: lr, warmupSteps, kind: "cosine", totalSteps: total, minRatio: 0.1 }),
      weightDecay: 0.01,
      maxGradNorm: 1
    })
    const losses: Array<number> = []
    const started = performance.now()
    const cpuStart = process.cpuUsage()
    let tokens = 0
    let logged = { at: started, step: 0, tokens: 0, loss: 0 }
    try {
      for (let k = 0; k < total; k++) {
        // A step blocks the thread for up to a second; a turn of the event loop between steps
        // lets SIGINT/SIGTERM interrupt the run at once instead of after the last step.
        yield* Effect.sleep(0)
        const step = tokenNormalized(sequences, plan[k]!)
        for (const s of step) tokens += s.tokens.length - 1
        const batches = policy.packSequences(step, { maxTokens: microBatchTokens, maxSeqLen: model.config.contextLength })
        const stats = yield* Effect.tryPromise({
          try: () => policy.trainStep(model, optimizer, batches, { kind: "sft" }),
          catch: (e) => new SftError({ message: `training step ${k + 1} failed: ${(e as Error).message}` })
        })
        losses.push(stats.loss)
        logged.loss += stats.loss
        const now = performance.now()
        if (k === 0 || k === total - 1 || now - logged.at >= 2000) {
          const n = k + 1 - logged.step
          const seconds = (now - logged.at) / 1000
          yield* Console.error(
            `step ${k + 1}/${total}  loss ${(logged.loss / n).toFixed(4)}  lr ${stats.lr.toExponential(2)}  ${((tokens - logged.tokens) / seconds).toFixed(0)} tokens/s  ${(seconds / n).toFixed(2)} s/step`
          )
          logged = { at: now, step: k + 1, tokens, loss: 0 }
        }
      }
    } finally {
      optimizer.dispose()
    }
    const cpu = process.cpuUsage(cpuStart)
    return { losses, seconds: (performance.now() - started) / 1000, cpuSeconds: (cpu.user + cpu.system) / 1e6, tokens }
  })

/** Writes the model directory next to `out`, then renames it into place. */
const writeAtomically = (policy: Policy, out: string, contents: ModelDir, record: object) =>
  Effect.gen(function*() {
    const tmp = `${out}.tmp-${process.pid}`
    const old = `${out}.old-${process.pid}`
    const removeTmp = Effect.promise(() => fs.rm(tmp, { recursive: true, force: true }))
    yield* io(`cannot prepare ${tmp}`, () => fs.rm(tmp, { recursive: true, force: true }))
    yield* Effect.zipRight(
      policy.saveModelDir(tmp, contents),
      io(`cannot write ${tmp}/sft.json`, () => fs.writeFile(path.join(tmp, "sft.json"), JSON.stringify(record, null, 2) + "\n"))
    ).pipe(Effect.onError(() => removeTmp))
    yield* io(`cannot move the model into ${out}`, async () => {
      const existed = await fs.rename(out, old).then(() => true, (e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? false : Promise.reject(e)))
      // If the new directory cannot take its place, the old model goes back.
      await fs.rename(tmp, out).catch(async (e) => {
        if (existed) await fs.rename(old, out)
        throw e
      })
      if (existed) await fs.rm(old, { recursive: true, force: true })
    })
  })

const sha256 = (file: string) => io(`cannot read ${file}`, async () => createHash("sha256").update(await fs.readFile(file)).digest("hex"))

const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)

/** Trains a policy on the demos and writes its model directory to `s.out`. */
export const trainSft = (s: SftSettings): Effect.Effect<SftResult, SftError | DemoError | CheckpointError> =>
  Effect.gen(function*() {
    yield* checkOut(s.out)
    const parsed = yield* readDemos(s.demos, { skipInvalid: s.skipInvalid })
    if (parsed.skipped.length > 0) {
      const first = parsed.skipped[0]!
      yield* Console.error(`skipped ${parsed.skipped.length} invalid demo lines (first: line ${first.line}: ${first.message})`)
    }
    const policy = yield* loadPolicy
    const start = yield* startingPolicy(policy, s, parsed.demos)
    const { built, plan } = yield* trainingData(s, parsed.demos, start)

    const backend = yield* Effect.tryPromise({ try: () => policy.initBackend(), catch: (e) => new SftError({ message: (e as Error).message }) })
    const memory = yield* Effect.try({ try: () => policy.backendMemory(backend), catch: (e) => new SftError({ message: (e as Error).message }) })
    const model = policy.Transformer.fromWeights(start.config, start.weights)
    const { dModel, nLayers, nHeads, contextLength } = start.config
    const params = policy.parameterCount(start.config)
    const fit = policy.microBatchFit(start.config, memory, { seqLen: contextLength, lora: false })
    yield* Console.error(
      `model: ${params} parameters (d ${dModel}, ${nLayers} layer${nLayers === 1 ? "" : "s"}, ${nHeads} heads, context ${contextLength}), ${start.fresh ? `initialised from seed ${s.seed}` : `from ${s.init}`}, backend ${backend}, micro-batches of ≤ ${fit.tokens} tokens`
    )
    const result = yield* trainLoop(policy, model, built.sequences, plan, s.lr, fit.tokens).pipe(Effect.onError(() => Effect.sync(() => model.dispose())))
    const weights = yield* Effect.tryPromise({ try: () => model.readWeightsAsync(), catch: (e) => new SftError({ message: `reading the trained weights: ${(e as Error).message}` }) }).pipe(
      Effect.ensuring(Effect.sync(() => model.dispose()))
    )
    const record = {
      command: s.command,
      demos: { file: s.demos, sha256: yield* sha256(s.demos), lines: parsed.demos.length, skipped: parsed.skipped.length, dropped: built.dropped.length, sequences: built.sequences.length },
      init: s.init ?? null,
      seed: s.seed,
      steps: plan.length,
      batch: s.batch,
      lr: s.lr,
      parameters: params,
      first_loss: result.losses[0],
      final_loss: result.losses[result.losses.length - 1],
      tokens: result.tokens,
      seconds: Number(result.seconds.toFixed(1)),
      cpu_seconds: Number(result.cpuSeconds.toFixed(1))
    }
    const contents = { config: start.config.withVersion(start.version), weights, tokenizer: start.tokenizer, chatTemplate: start.chatTemplate, generationConfig: start.generationConfig }
    yield* writeAtomically(policy, s.out, contents, record)
    const window = Math.max(1, Math.min(10, Math.floor(result.losses.length / 4)))
    return {
      out: s.out,
      steps: plan.length,
      ...result,
      startLoss: mean(result.losses.slice(0, window)),
      endLoss: mean(result.losses.slice(-window))
    }
  })
