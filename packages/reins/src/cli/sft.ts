/**
 * `reins sft --demos FILE --out DIR [--init DIR] ...`: supervised fine-tuning of a policy on
 * demonstration transcripts (JSONL, one OpenAI chat conversation per line with its `tools`).
 *
 * Without `--init` it builds a new policy: a byte-level BPE learned from the rendered demos (digits
 * stay single tokens), the compact chat template (or `--template FILE`), and a freshly initialised
 * small transformer. With `--init DIR` it continues from that model directory. Each demo becomes
 * one sequence with loss on exactly the assistant tokens (as the Gateway would have recorded them);
 * training is token-normalized cross-entropy with AdamW and warmup + cosine decay. Progress goes
 * to stderr; the model directory is written to a temporary sibling and renamed into place, with
 * `sft.json` recording how it was made. Same arguments and seed → same bytes.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type { ChatTemplate, Tokenizer } from "@reins/policy/text"
import type { DemoLine, SftSequence } from "@reins/trainer"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"

// Loaded by `run` before anything uses it, so `reins --help` and the other commands start fast.
let trainer: typeof import("@reins/trainer")
const loadTrainer = Effect.promise(async () => (trainer ??= await import("@reins/trainer")))

export class SftError extends Data.TaggedError("SftError")<{ readonly message: string }> {}

const DEFAULTS = { vocab: 768, layers: 2, dim: 128, heads: 4, context: 256, batch: 32, lr: 2e-3, seed: 0 } as const
/** Micro-batch budget: the wasm heap holds ≤ 16 × 256 tokens of activations. */
const MICRO_BATCH_TOKENS = 16 * 256

const int = (name: string, description: string) => Options.integer(name).pipe(Options.optional, Options.withDescription(description))

const demos = Options.file("demos").pipe(Options.withDescription("Demonstrations: JSONL, one {\"messages\": [...], \"tools\": [...]} conversation per line (OpenAI chat shape)."))
const out = Options.directory("out").pipe(Options.withDescription("Model directory to write (replaced atomically if it already holds a model)."))
const init = Options.directory("init").pipe(Options.optional, Options.withDescription("Continue training this model directory instead of building a new policy."))
const vocab = int("vocab", `New policy: vocabulary size, an upper bound (default ${DEFAULTS.vocab}).`)
const layers = int("layers", `New policy: transformer layers (default ${DEFAULTS.layers}).`)
const dim = int("dim", `New policy: model width d_model (default ${DEFAULTS.dim}).`)
const heads = int("heads", `New policy: attention heads (default ${DEFAULTS.heads}).`)
const context = int("context", `New policy: context length in tokens (default ${DEFAULTS.context}); longer demos are dropped.`)
const template = Options.file("template").pipe(Options.optional, Options.withDescription("New policy: chat template (.jinja) instead of the compact one."))
const steps = int("steps", "Optimizer steps (default: one epoch).")
const epochs = Options.float("epochs").pipe(Options.optional, Options.withDescription("Passes over the demos (may be fractional; default 1)."))
const batch = int("batch", `Demos per optimizer step (default ${DEFAULTS.batch}).`)
const lr = Options.float("lr").pipe(Options.optional, Options.withDescription(`Peak learning rate (default ${DEFAULTS.lr}; warmup, then cosine decay to a tenth).`))
const seed = int("seed", `Seed for initialisation and shuffling (default ${DEFAULTS.seed}).`)
const skipInvalid = Options.boolean("skip-invalid").pipe(Options.withDescription("Skip bad demo lines (counted) instead of failing on the first."))

type Raw = {
  readonly demos: string
  readonly out: string
  readonly init: Option.Option<string>
  readonly vocab: Option.Option<number>
  readonly layers: Option.Option<number>
  readonly dim: Option.Option<number>
  readonly heads: Option.Option<number>
  readonly context: Option.Option<number>
  readonly template: Option.Option<string>
  readonly steps: Option.Option<number>
  readonly epochs: Option.Option<number>
  readonly batch: Option.Option<number>
  readonly lr: Option.Option<number>
  readonly seed: Option.Option<number>
  readonly skipInvalid: boolean
}

interface Settings {
  readonly demos: string
  readonly out: string
  readonly init: string | undefined
  readonly arch: { readonly vocab: number; readonly layers: number; readonly dim: number; readonly heads: number; readonly context: number }
  readonly template: string | undefined
  readonly steps: number | undefined
  readonly epochs: number
  readonly batch: number
  readonly lr: number
  readonly seed: number
  readonly skipInvalid: boolean
}

/** Checks the arguments together; every problem is one clear sentence. */
const settingsOf = (raw: Raw): Effect.Effect<Settings, SftError> =>
  Effect.suspend(() => {
    const fail = (message: string) => Effect.fail(new SftError({ message }))
    const positive = { vocab: raw.vocab, layers: raw.layers, dim: raw.dim, heads: raw.heads, context: raw.context, steps: raw.steps, batch: raw.batch }
    for (const [name, value] of Object.entries(positive)) {
      if (Option.isSome(value) && value.value < 1) return fail(`--${name} must be a positive integer, got ${value.value}`)
    }
    if (Option.isSome(raw.seed) && raw.seed.value < 0) return fail(`--seed must be a non-negative integer, got ${raw.seed.value}`)
    if (Option.isSome(raw.steps) && Option.isSome(raw.epochs)) return fail("give --steps or --epochs, not both")
    if (Option.isSome(raw.epochs) && !(raw.epochs.value > 0)) return fail(`--epochs must be positive, got ${raw.epochs.value}`)
    if (Option.isSome(raw.lr) && !(raw.lr.value > 0 && raw.lr.value < 1)) return fail(`--lr must be between 0 and 1, got ${raw.lr.value}`)
    if (Option.isSome(raw.init)) {
      const given: Record<string, Option.Option<unknown>> = { vocab: raw.vocab, layers: raw.layers, dim: raw.dim, heads: raw.heads, context: raw.context, template: raw.template }
      const fixed = Object.keys(given).filter((k) => Option.isSome(given[k]!))
      if (fixed.length > 0) return fail(`${fixed.map((k) => `--${k}`).join(", ")} cannot be combined with --init (the model directory fixes the vocabulary, chat template and model shape)`)
    }
    const arch = {
      vocab: Option.getOrElse(raw.vocab, () => DEFAULTS.vocab),
      layers: Option.getOrElse(raw.layers, () => DEFAULTS.layers),
      dim: Option.getOrElse(raw.dim, () => DEFAULTS.dim),
      heads: Option.getOrElse(raw.heads, () => DEFAULTS.heads),
      context: Option.getOrElse(raw.context, () => DEFAULTS.context)
    }
    if (arch.vocab < 261) return fail(`--vocab ${arch.vocab} is too small: it must be at least 261 (256 byte tokens + 5 special tokens)`)
    if (arch.dim % arch.heads !== 0 || (arch.dim / arch.heads) % 2 !== 0) {
      return fail(`--dim ${arch.dim} must be a multiple of 2 × --heads ${arch.heads} (rotary positions need an even head dimension)`)
    }
    if (arch.context < 16) return fail(`--context ${arch.context} is too small (at least 16 tokens)`)
    return Effect.succeed({
      demos: raw.demos,
      out: path.resolve(raw.out),
      init: Option.getOrUndefined(raw.init),
      arch,
      template: Option.getOrUndefined(raw.template),
      steps: Option.getOrUndefined(raw.steps),
      epochs: Option.getOrElse(raw.epochs, () => 1),
      batch: Option.getOrElse(raw.batch, () => DEFAULTS.batch),
      lr: Option.getOrElse(raw.lr, () => DEFAULTS.lr),
      seed: Option.getOrElse(raw.seed, () => DEFAULTS.seed),
      skipInvalid: raw.skipInvalid
    })
  })

const io = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (e) => new SftError({ message: `${what}: ${(e as Error).message}` }) })

/** `--out` must be absent, an empty directory, or a model directory (never someone's other files). */
const checkOut = (out: string) =>
  io(`cannot inspect ${out}`, async () => {
    const stat = await fs.stat(out).catch((e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? undefined : Promise.reject(e)))
    if (stat === undefined) return undefined
    if (!stat.isDirectory()) return `--out ${out} exists and is not a directory`
    const entries = await fs.readdir(out)
    return entries.length === 0 || entries.includes("config.json") ? undefined : `--out ${out} is a non-empty directory without a model (config.json); refusing to replace it`
  }).pipe(Effect.flatMap((problem) => (problem === undefined ? Effect.void : Effect.fail(new SftError({ message: problem })))))

/** The policy training starts from: a model directory, or a new tokenizer + template + config. */
const startingPolicy = (s: Settings, demoLines: ReadonlyArray<DemoLine>) =>
  Effect.gen(function*() {
    const policy = yield* Effect.promise(() => import("@reins/policy"))
    if (s.init !== undefined) {
      const dir = yield* policy.loadModelDir(s.init)
      const chatTemplate = dir.chatTemplate
      // Demos are laid out by ChatTemplate's turn rule (sft/sequences.ts), which a Hugging Face template need not follow.
      if (!(chatTemplate instanceof policy.ChatTemplate)) {
        return yield* new SftError({ message: `--init ${s.init}: reins sft lays demos out with reins's own chat template; this model has a Hugging Face one` })
      }
      return { ...dir, chatTemplate, version: dir.config.version + 1, fresh: false }
    }
    const template: ChatTemplate = s.template === undefined
      ? trainer.compactChatTemplate()
      : yield* io(`cannot read --template ${s.template}`, () => fs.readFile(s.template!, "utf8")).pipe(
        Effect.flatMap((source) => Effect.try({ try: () => policy.ChatTemplate.fromString(source), catch: (e) => new SftError({ message: `--template ${s.template}: ${(e as Error).message}` }) }))
      )
    const started = performance.now()
    const tokenizer: Tokenizer = yield* Effect.try({
      try: () => trainer.trainDemoTokenizer(demoLines.map((d) => d.demo), template, { vocabSize: s.arch.vocab }),
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

interface TrainResult {
  readonly losses: ReadonlyArray<number>
  readonly seconds: number
  /** CPU time of the loop (on a shared machine, wall time alone overstates the cost). */
  readonly cpuSeconds: number
  readonly tokens: number
}

/** The optimizer loop; logs step, loss, learning rate and speed to stderr. */
const trainLoop = (
  policy: typeof import("@reins/policy"),
  model: import("@reins/policy").Transformer,
  sequences: ReadonlyArray<SftSequence>,
  plan: ReadonlyArray<Int32Array>,
  lr: number
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
        const step = trainer.tokenNormalized(sequences, plan[k]!)
        for (const s of step) tokens += s.tokens.length - 1
        const batches = policy.packSequences(step, { maxTokens: MICRO_BATCH_TOKENS, maxSeqLen: model.config.contextLength })
        const stats = yield* Effect.try({
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
    return { losses, seconds: (performance.now() - started) / 1000, cpuSeconds: (cpu.user + cpu.system) / 1e6, tokens } satisfies TrainResult
  })

/** Writes the model directory next to `out`, then renames it into place. */
const writeAtomically = (out: string, contents: import("@reins/policy").ModelDir, record: object) =>
  Effect.gen(function*() {
    const policy = yield* Effect.promise(() => import("@reins/policy"))
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

type Start = Effect.Effect.Success<ReturnType<typeof startingPolicy>>

/** Demos → sequences (reporting what was dropped) and the step plan. */
const trainingData = (s: Settings, demoLines: ReadonlyArray<DemoLine>, start: Start) =>
  Effect.gen(function*() {
    const context = start.config.contextLength
    const built = yield* Effect.try({
      try: () => trainer.buildSequences({ tokenizer: start.tokenizer, template: start.chatTemplate }, demoLines, context),
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
    const plan = trainer.planSteps({ count, batchSize: s.batch, steps: s.steps, epochs: s.epochs, seed: s.seed + 1 })
    let tokens = 0
    let longest = 0
    let trained = 0
    for (const q of built.sequences) {
      tokens += q.tokens.length
      longest = Math.max(longest, q.tokens.length)
      trained += q.assistantTokens
    }
    yield* Console.error(
      `${count} sequences, ${tokens} tokens (mean ${(tokens / count).toFixed(1)}, max ${longest}), ${trained} trained; ${plan.length} steps of ${s.batch} (${((plan.length * s.batch) / count).toFixed(2)} epochs)`
    )
    return { built, plan }
  })

const run = (raw: Raw) =>
  Effect.gen(function*() {
    yield* loadTrainer
    const s = yield* settingsOf(raw)
    yield* checkOut(s.out)
    const parsed = yield* trainer.readDemos(s.demos, { skipInvalid: s.skipInvalid })
    if (parsed.skipped.length > 0) {
      const first = parsed.skipped[0]!
      yield* Console.error(`skipped ${parsed.skipped.length} invalid demo lines (first: line ${first.line}: ${first.message})`)
    }
    const start = yield* startingPolicy(s, parsed.demos)
    const { built, plan } = yield* trainingData(s, parsed.demos, start)

    const policy = yield* Effect.promise(() => import("@reins/policy"))
    const backend = yield* Effect.tryPromise({ try: () => policy.initBackend(), catch: (e) => new SftError({ message: (e as Error).message }) })
    const model = policy.Transformer.fromWeights(start.config, start.weights)
    const { dModel, nLayers, nHeads, contextLength } = start.config
    const params = policy.parameterCount(start.config)
    yield* Console.error(
      `model: ${params} parameters (d ${dModel}, ${nLayers} layer${nLayers === 1 ? "" : "s"}, ${nHeads} heads, context ${contextLength}), ${start.fresh ? `initialised from seed ${s.seed}` : `from ${s.init}`}, backend ${backend}`
    )
    const result = yield* trainLoop(policy, model, built.sequences, plan, s.lr).pipe(Effect.onError(() => Effect.sync(() => model.dispose())))
    const weights = model.readWeights()
    model.dispose()
    const record = {
      command: ["reins", ...process.argv.slice(2)],
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
    yield* writeAtomically(s.out, contents, record)
    const avg = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)
    const window = Math.max(1, Math.min(10, Math.floor(result.losses.length / 4)))
    yield* Console.log(
      `trained ${plan.length} steps in ${result.seconds.toFixed(1)} s, ${result.cpuSeconds.toFixed(1)} s CPU (${(result.tokens / result.seconds).toFixed(0)} tokens/s): loss ${avg(result.losses.slice(0, window)).toFixed(4)} → ${avg(result.losses.slice(-window)).toFixed(4)}; wrote ${s.out}`
    )
  }).pipe(
    // A clear one-line message and exit code 1 instead of a stack trace for expected failures.
    Effect.catchTags({
      SftError: (e) => report(e.message),
      DemoError: (e) => report(e.message),
      CheckpointError: (e) => report(e.message)
    })
  )

const report = (message: string) => Console.error(`reins sft: ${message}`).pipe(Effect.zipRight(Effect.sync(() => void (process.exitCode = 1))))

export const sft = Command.make(
  "sft",
  { demos, out, init, vocab, layers, dim, heads, context, template, steps, epochs, batch, lr, seed, skipInvalid },
  run
).pipe(Command.withDescription("Train a policy on demonstration transcripts (supervised fine-tuning) and write a model directory."))
