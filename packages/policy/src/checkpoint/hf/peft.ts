/**
 * LoRA adapters in PEFT's layout, so `peft` (`PeftModel.from_pretrained`) and vLLM
 * (`--enable-lora`) load them unchanged:
 *
 *   adapter_config.json          peft_type LORA, r, lora_alpha, lora_dropout, target_modules, …
 *   adapter_model.safetensors    base_model.model.model.layers.{l}.{module}.lora_A.weight [r, in]
 *                                and .lora_B.weight [out, r] (nn.Linear layout)
 *
 * Ours are A [in, r] and B [r, out] (x·A·B), so both are transposed on the way. What PEFT can
 * express but this model does not run (rsLoRA, DoRA, biases, per-layer ranks, extra saved
 * modules) is refused by key on load.
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { ModelConfig } from "../../model/config.js"
import { LORA_TARGETS, LoraConfig, type LoraTarget, loraSites } from "../../model/lora.js"
import type { Weights } from "../../model/weights.js"
import { transpose } from "../../model/transpose.js"
import { toF32 } from "../dtype.js"
import { encodeSafetensors, SafetensorsReader, type TensorEntry } from "../safetensors.js"
import { hfName } from "./weights.js"

export const ADAPTER_CONFIG_FILE = "adapter_config.json"
export const ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"

export class PeftError extends Error {
  override readonly name = "PeftError"
  constructor(
    readonly file: string,
    message: string
  ) {
    super(`${file}: ${message}`)
  }
}

/** PEFT's name of one of our adapters (`layers.3.attn.wq.lora_A` → `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`). */
const peftName = (param: string, which: "lora_A" | "lora_B"): string => {
  const module = hfName(param).hf.replace(/\.weight$/, "")
  return `base_model.model.${module}.${which}.weight`
}

/** Writes adapter_config.json and adapter_model.safetensors (F32) into `dir`. */
export const writePeftAdapter = async (
  dir: string,
  config: ModelConfig,
  lora: LoraConfig,
  adapters: Weights,
  options: { readonly baseModel?: string; readonly version?: number } = {}
): Promise<void> => {
  await fs.mkdir(dir, { recursive: true })
  const tensors: Record<string, TensorEntry> = {}
  for (const s of loraSites(config, lora)) {
    tensors[peftName(s.param, "lora_A")] = { dtype: "F32", shape: [lora.rank, s.rows], data: transpose(adapters[s.a]!, s.rows, lora.rank) }
    tensors[peftName(s.param, "lora_B")] = { dtype: "F32", shape: [s.cols, lora.rank], data: transpose(adapters[s.b]!, lora.rank, s.cols) }
  }
  const adapterConfig = {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: options.baseModel ?? null,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: lora.dropout,
    target_modules: [...lora.targets],
    bias: "none",
    fan_in_fan_out: false,
    use_rslora: false,
    use_dora: false,
    modules_to_save: null,
    layers_to_transform: null,
    rank_pattern: {},
    alpha_pattern: {},
    inference_mode: true,
    ...(options.version !== undefined ? { reins_policy_version: options.version } : {})
  }
  const write = async (file: string, data: string | Uint8Array) => {
    const tmp = `${file}.tmp-${process.pid}`
    await fs.writeFile(tmp, data)
    await fs.rename(tmp, file)
  }
  await write(path.join(dir, ADAPTER_WEIGHTS_FILE), encodeSafetensors(tensors, { format: "pt" }))
  await write(path.join(dir, ADAPTER_CONFIG_FILE), JSON.stringify(adapterConfig, null, 2) + "\n")
}

/** Reads a PEFT LoRA adapter for `config`: its settings and A/B in our layout. */
export const readPeftAdapter = async (dir: string, config: ModelConfig): Promise<{ readonly lora: LoraConfig; readonly adapters: Weights; readonly baseModel: string | undefined }> => {
  const configFile = path.join(dir, ADAPTER_CONFIG_FILE)
  let raw: Record<string, unknown>
  try {
    raw = JSON.parse(await fs.readFile(configFile, "utf8")) as Record<string, unknown>
  } catch (e) {
    throw new PeftError(configFile, (e as NodeJS.ErrnoException).code === "ENOENT" ? "missing" : `cannot read (${(e as Error).message})`)
  }
  const refuse = (key: string, ok: (v: unknown) => boolean, what: string) => {
    if (!ok(raw[key])) throw new PeftError(configFile, `${key}: ${JSON.stringify(raw[key])} is not supported (${what})`)
  }
  const empty = (v: unknown) => v === undefined || v === null || (typeof v === "object" && Object.keys(v as object).length === 0)
  refuse("peft_type", (v) => v === "LORA", "only LORA")
  refuse("use_rslora", (v) => v === undefined || v === false, "plain LoRA scaling alpha / r")
  refuse("use_dora", (v) => v === undefined || v === false, "no DoRA")
  refuse("bias", (v) => v === undefined || v === "none", "bias must be \"none\"")
  refuse("fan_in_fan_out", (v) => v === undefined || v === false, "nn.Linear layout")
  refuse("modules_to_save", empty, "no extra trained modules")
  refuse("layers_to_transform", empty, "every layer")
  refuse("rank_pattern", empty, "one rank for all")
  refuse("alpha_pattern", empty, "one alpha for all")
  const targets = raw["target_modules"]
  if (!Array.isArray(targets) || targets.length === 0 || !targets.every((t) => LORA_TARGETS.includes(t as LoraTarget))) {
    throw new PeftError(configFile, `target_modules: ${JSON.stringify(targets)} is not a list of ${LORA_TARGETS.join(", ")}`)
  }
  let lora: LoraConfig
  try {
    lora = new LoraConfig({ rank: raw["r"] as number, alpha: raw["lora_alpha"] as number, dropout: (raw["lora_dropout"] as number | undefined) ?? 0, targets: targets as [LoraTarget, ...Array<LoraTarget>] })
  } catch (e) {
    throw new PeftError(configFile, `r / lora_alpha / lora_dropout: ${(e as Error).message}`)
  }
  const file = path.join(dir, ADAPTER_WEIGHTS_FILE)
  let reader: SafetensorsReader
  try {
    reader = await SafetensorsReader.open(file)
  } catch (e) {
    throw new PeftError(file, (e as NodeJS.ErrnoException).code === "ENOENT" ? "missing" : (e as Error).message)
  }
  try {
    const adapters: Weights = {}
    const expected = new Set<string>()
    for (const s of loraSites(config, lora)) {
      for (const [which, ours, shape] of [
        ["lora_A", s.a, [lora.rank, s.rows]],
        ["lora_B", s.b, [s.cols, lora.rank]]
      ] as const) {
        const name = peftName(s.param, which)
        expected.add(name)
        const header = reader.header.tensors.get(name)
        if (header === undefined) throw new PeftError(file, `missing tensor ${name}`)
        if (header.shape.join(",") !== shape.join(",")) throw new PeftError(file, `tensor ${name} is [${header.shape.join(", ")}], expected [${shape.join(", ")}]`)
        const entry = await reader.read(name)
        adapters[ours] = transpose(toF32(entry.dtype, entry.data), shape[0], shape[1])
      }
    }
    for (const name of reader.header.tensors.keys()) if (!expected.has(name)) throw new PeftError(file, `unexpected tensor ${name}`)
    const base = raw["base_model_name_or_path"]
    return { lora, adapters, baseModel: typeof base === "string" ? base : undefined }
  } finally {
    await reader.close()
  }
}
