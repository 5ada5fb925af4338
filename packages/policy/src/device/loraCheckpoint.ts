/**
 * Checkpoints of a LoRA run: only what is trained — the adapters in PEFT's layout
 * (adapter_config.json + adapter_model.safetensors, naming the base model's directory) and their
 * optimizer state — written atomically like a full checkpoint. `loadModelDir` of such a
 * directory gives the base with the adapters merged (for `reins eval`, `serve`, `export`).
 */
import { DeviceError } from "@reins/protocol"
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { ADAPTER_CONFIG_FILE, readPeftAdapter, writePeftAdapter } from "../checkpoint/hf/peft.js"
import { loadOptimizerState, type OptimizerState, saveOptimizerState } from "../checkpoint/modelDir.js"
import type { LoraConfig } from "../model/lora.js"
import type { Transformer } from "../model/transformer.js"
import type { Weights } from "../model/weights.js"
import { writeDirAtomically } from "./checkpoint.js"

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e))

export const saveLoraCheckpointDir = (
  dir: string,
  model: Transformer,
  options: { readonly version: number; readonly baseModel: string; readonly optimizer: OptimizerState | undefined }
): Effect.Effect<void, DeviceError> =>
  writeDirAtomically(dir, (tmp) =>
    Effect.gen(function*() {
      yield* Effect.tryPromise({
        try: async () => writePeftAdapter(tmp, model.config, model.lora!, await model.readAdaptersAsync(), { baseModel: path.resolve(options.baseModel), version: options.version }),
        catch: (e) => new DeviceError({ message: `Save: ${reason(e)}` })
      })
      if (options.optimizer !== undefined) {
        yield* saveOptimizerState(tmp, options.optimizer, options.version).pipe(Effect.mapError((e) => new DeviceError({ message: `Save: ${e.message}` })))
      }
    }))

/** The adapters, version and optimizer state of a LoRA checkpoint, checked against the model's LoRA settings. */
export const readLoraCheckpointDir = (
  model: Transformer,
  lora: LoraConfig,
  dir: string
): Effect.Effect<{ readonly adapters: Weights; readonly version: number; readonly optimizer: OptimizerState | undefined }, DeviceError> =>
  Effect.gen(function*() {
    const fail = (message: string) => new DeviceError({ message: `Restore: ${message}` })
    const adapter = yield* Effect.tryPromise({ try: () => readPeftAdapter(dir, model.config), catch: (e) => fail(reason(e)) })
    const same = adapter.lora.rank === lora.rank && adapter.lora.alpha === lora.alpha && adapter.lora.targets.join() === lora.targets.join()
    if (!same) {
      return yield* fail(
        `${dir} holds LoRA rank ${adapter.lora.rank}, alpha ${adapter.lora.alpha} on ${adapter.lora.targets.join(", ")}; this run trains rank ${lora.rank}, alpha ${lora.alpha} on ${lora.targets.join(", ")}`
      )
    }
    const raw = yield* Effect.tryPromise({
      try: async () => JSON.parse(await fs.readFile(path.join(dir, ADAPTER_CONFIG_FILE), "utf8")) as Record<string, unknown>,
      catch: (e) => fail(reason(e))
    })
    const version = raw["reins_policy_version"]
    if (typeof version !== "number" || !Number.isSafeInteger(version) || version < 0) return yield* fail(`${dir}/${ADAPTER_CONFIG_FILE} has no reins_policy_version`)
    const optimizer = yield* loadOptimizerState(dir).pipe(Effect.mapError((e) => fail(e.message)))
    return { adapters: adapter.adapters, version, optimizer }
  })
