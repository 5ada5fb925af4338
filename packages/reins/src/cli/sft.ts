/**
 * `reins sft --demos FILE --out DIR [--init DIR] ...`: supervised fine-tuning of a policy on
 * demonstration transcripts (JSONL, one OpenAI chat conversation per line with its `tools`).
 * This file reads and checks the options and prints the result; the training is
 * `trainSft` in `@reins/trainer` (sft/train.ts).
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type { SftError, SftSettings } from "@reins/trainer"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as path from "node:path"
import { failWith } from "./node.js"

// Loaded by `run` before anything uses it, so `reins --help` and the other commands start fast.
let trainer: typeof import("@reins/trainer")
const loadTrainer = Effect.promise(async () => (trainer ??= await import("@reins/trainer")))

const DEFAULTS = { vocab: 768, layers: 2, dim: 128, heads: 4, context: 256, batch: 32, lr: 2e-3, seed: 0 } as const

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

const sftOptions = { demos, out, init, vocab, layers, dim, heads, context, template, steps, epochs, batch, lr, seed, skipInvalid }
type Raw = Command.Command.ParseConfig<typeof sftOptions>

/** Checks the arguments together; every problem is one clear sentence. */
const settingsOf = (raw: Raw): Effect.Effect<SftSettings, SftError> =>
  Effect.suspend(() => {
    const fail = (message: string) => Effect.fail(new trainer.SftError({ message }))
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
      skipInvalid: raw.skipInvalid,
      command: ["reins", ...process.argv.slice(2)]
    })
  })

const run = (raw: Raw) =>
  Effect.gen(function*() {
    yield* loadTrainer
    const r = yield* Effect.flatMap(settingsOf(raw), trainer.trainSft)
    yield* Console.log(
      `trained ${r.steps} steps in ${r.seconds.toFixed(1)} s, ${r.cpuSeconds.toFixed(1)} s CPU (${(r.tokens / r.seconds).toFixed(0)} tokens/s): loss ${r.startLoss.toFixed(4)} → ${r.endLoss.toFixed(4)}; wrote ${r.out}`
    )
  }).pipe(
    // A clear one-line message and exit code 1 instead of a stack trace for expected failures.
    failWith("reins sft")
  )

export const sft = Command.make(
  "sft",
  sftOptions,
  run
).pipe(Command.withDescription("Train a policy on demonstration transcripts (supervised fine-tuning) and write a model directory."))
