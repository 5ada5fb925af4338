/**
 * `reins export --model DIR --out DIR [--merge-lora] [--dtype bf16|f16|f32]`: writes a model as
 * a Hugging Face directory that `transformers`, vLLM and llama.cpp's converter load unchanged —
 * config.json with `architectures`, model.safetensors in HF names and the chosen dtype, the
 * tokenizer and template files, generation_config.json. `--merge-lora` takes a LoRA checkpoint
 * (a PEFT adapter directory) and writes its base with the adapter merged in.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { existsSync, readdirSync } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { failWith } from "./node.js"

class ExportError extends Data.TaggedError("ExportError")<{ readonly message: string }> {}

const model = Options.directory("model").pipe(Options.withDescription("The model directory (or LoRA checkpoint, with --merge-lora) to export."))
const out = Options.directory("out").pipe(Options.withDescription("Where to write the Hugging Face model directory (must not exist or be empty)."))
const mergeLora = Options.boolean("merge-lora").pipe(Options.withDescription("MODEL is a LoRA adapter: write its base with the adapter merged in."))
const dtype = Options.choice("dtype", ["bf16", "f16", "f32"]).pipe(
  Options.optional,
  Options.withDescription("Weights' dtype (default: the source checkpoint's, f32 for reins's own models).")
)

const DTYPES = { bf16: "bfloat16", f16: "float16", f32: "float32" } as const

/** Tokenizer files a Hugging Face directory may carry besides tokenizer.json. */
const TOKENIZER_EXTRAS = ["tokenizer_config.json", "special_tokens_map.json"]

const run = (args: { model: string; out: string; mergeLora: boolean; dtype: Option.Option<"bf16" | "f16" | "f32"> }) =>
  Effect.gen(function* () {
    // Loaded on use: TensorFlow.js is no part of the other commands' start-up.
    const policy = yield* Effect.promise(() => import("@reins/policy"))
    const isAdapter = existsSync(path.join(args.model, policy.ADAPTER_CONFIG_FILE)) && !existsSync(path.join(args.model, "config.json"))
    if (isAdapter && !args.mergeLora) {
      return yield* new ExportError({ message: `${args.model} is a LoRA adapter (PEFT layout, loadable as it is by peft and vLLM); pass --merge-lora to write base + adapter as one model` })
    }
    if (!isAdapter && args.mergeLora) return yield* new ExportError({ message: `--merge-lora: ${args.model} is not a LoRA adapter (it has no ${policy.ADAPTER_CONFIG_FILE})` })
    if (existsSync(args.out) && readdirSync(args.out).length > 0) return yield* new ExportError({ message: `--out ${args.out} exists and is not empty` })
    const loaded = yield* policy.loadModelDir(args.model)
    // A loaded directory is always a Hugging Face one (loadModelDir refuses anything else).
    const hf = loaded.hf ?? policy.asHfModel(loaded.config, loaded.generationConfig.eosTokenIds)
    const target = { ...hf, dtype: Option.match(args.dtype, { onNone: () => hf.dtype, onSome: (d) => DTYPES[d] }) }
    yield* policy.saveModelDir(args.out, { ...loaded, hf: target })
    // A loaded Hugging Face model keeps its tokenizer_config.json (special tokens, template) too.
    const source = isAdapter ? (yield* policy.readAdapterConfig(args.model)).baseDir : args.model
    for (const file of TOKENIZER_EXTRAS) {
      const from = path.join(source, file)
      if (existsSync(from)) {
        yield* Effect.tryPromise({ try: () => fs.copyFile(from, path.join(args.out, file)), catch: (e) => new ExportError({ message: `copying ${from}: ${String(e)}` }) })
      }
    }
    yield* Console.log(`wrote ${hf.architecture} (${target.dtype}, policy version ${loaded.config.version}) to ${args.out}`)
  }).pipe(failWith("reins export"))

export const exportCommand = Command.make("export", { model, out, mergeLora, dtype }, run).pipe(
  Command.withDescription("Write a model (or a LoRA checkpoint merged into its base) as a Hugging Face directory.")
)
