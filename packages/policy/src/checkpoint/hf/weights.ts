/**
 * Hugging Face weights in and out: `model.safetensors`, or shards named by
 * `model.safetensors.index.json`, with Hugging Face tensor names and `nn.Linear`'s [out, in]
 * layout, stored as BF16, F16 or F32. The model keeps its own names and [in, out] matrices
 * (see model/config.ts `parameterShapes`; a model multiplied in place keeps [out, in]), so
 * loading renames, converts to float32 and transposes where needed — chunk by chunk, straight
 * into each parameter's destination (a JS array, or the tensor in the wasm heap), so a large
 * checkpoint is never in memory twice.
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { type ModelConfig, parameterCount, parameterShapes } from "../../model/config.js"
import { type MatrixLayout, storedShapes } from "../../model/matrixLayout.js"
import type { Weights } from "../../model/weights.js"
import { transpose, transposeInto } from "../../model/transpose.js"
import { f32ToBf16, f32ToF16, toF32 } from "../dtype.js"
import { encodeSafetensors, SafetensorsReader, type TensorEntry, typedValues } from "../safetensors.js"
import type { HfDtype } from "./config.js"

export const HF_WEIGHTS_FILE = "model.safetensors"
export const HF_INDEX_FILE = "model.safetensors.index.json"

/** A weights file (or its index) that cannot be read or does not fit the config. */
export class HfWeightsError extends Error {
  override readonly name = "HfWeightsError"
  constructor(
    readonly file: string,
    message: string
  ) {
    super(`${file}: ${message}`)
  }
}

/** How one of our parameters is stored in a Hugging Face checkpoint. */
interface HfName {
  readonly hf: string
  /** A linear layer's weight: [out, in] there, [in, out] here. */
  readonly transpose: boolean
}

const LINEARS: Record<string, string> = {
  "attn.wq": "self_attn.q_proj",
  "attn.wk": "self_attn.k_proj",
  "attn.wv": "self_attn.v_proj",
  "attn.wo": "self_attn.o_proj",
  "mlp.w1": "mlp.gate_proj",
  "mlp.w3": "mlp.up_proj",
  "mlp.w2": "mlp.down_proj"
}
const VECTORS: Record<string, string> = {
  "attn_norm.weight": "input_layernorm.weight",
  "mlp_norm.weight": "post_attention_layernorm.weight",
  "attn.bq": "self_attn.q_proj.bias",
  "attn.bk": "self_attn.k_proj.bias",
  "attn.bv": "self_attn.v_proj.bias",
  "attn.bo": "self_attn.o_proj.bias",
  "attn.q_norm.weight": "self_attn.q_norm.weight",
  "attn.k_norm.weight": "self_attn.k_norm.weight"
}

/** The Hugging Face name of each of our parameters. */
export const hfName = (name: string): HfName => {
  if (name === "tok_embeddings.weight") return { hf: "model.embed_tokens.weight", transpose: false }
  if (name === "norm.weight") return { hf: "model.norm.weight", transpose: false }
  if (name === "lm_head.weight") return { hf: "lm_head.weight", transpose: true }
  const m = /^layers\.(\d+)\.(.+)$/.exec(name)
  if (m !== null) {
    const [, l, rest] = m
    if (rest! in LINEARS) return { hf: `model.layers.${l}.${LINEARS[rest!]}.weight`, transpose: true }
    if (rest! in VECTORS) return { hf: `model.layers.${l}.${VECTORS[rest!]}`, transpose: false }
  }
  throw new Error(`parameter ${name} has no Hugging Face name (only the Llama family's parameters do)`)
}

/** Tensors Hugging Face files may carry that are not weights (old Llama checkpoints). */
const IGNORED = /\.rotary_emb\.inv_freq$/

/** The shard that holds each tensor: from the index, or the single file. */
const shardMap = async (dir: string): Promise<Map<string, string>> => {
  const index = path.join(dir, HF_INDEX_FILE)
  let text: string
  try {
    text = await fs.readFile(index, "utf8")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw new HfWeightsError(index, `cannot read (${(e as Error).message})`)
    return new Map() // a single model.safetensors: every tensor is there
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    throw new HfWeightsError(index, `invalid JSON (${(e as Error).message})`)
  }
  const map = (json as { weight_map?: unknown } | null)?.weight_map
  if (typeof map !== "object" || map === null || Array.isArray(map)) throw new HfWeightsError(index, "has no weight_map object")
  const out = new Map<string, string>()
  for (const [name, file] of Object.entries(map)) {
    if (typeof file !== "string" || file.includes("/") || file.includes("\\")) throw new HfWeightsError(index, `weight_map.${name} is not a file name: ${JSON.stringify(file)}`)
    out.set(name, file)
  }
  return out
}

/**
 * Where the loader writes each parameter (float32, our names, the layout asked for): `alloc`
 * makes its destination, `values` returns the values to write into — asked again for every
 * chunk, since a view of the wasm heap does not outlive an allocation — and `dispose` drops a
 * destination when the load fails.
 */
export interface WeightSink<T> {
  /** Told how many float32 values all destinations will hold, once, before the first `alloc`. */
  reserve?(values: number): void
  alloc(name: string, shape: ReadonlyArray<number>): T
  values(dest: T): Float32Array
  /**
   * Writes `values`, rows of a stored [rows, cols] matrix, transposed into `dest` ([cols, stride])
   * from column `offset` on, as `transposeInto` (transpose.ts) does over `values(dest)` when the
   * sink has no faster way.
   */
  transpose?(dest: T, values: Float32Array, rows: number, cols: number, stride: number, offset: number): void
  dispose(dest: T): void
  /** Called once when the load is over, done or failed: drops what the sink held for it. */
  close?(): void
}

/** Each parameter into a fresh Float32Array. */
export const arraySink: WeightSink<Float32Array> = {
  alloc: (_, shape) => new Float32Array(shape.reduce((a, b) => a * b, 1)),
  values: (a) => a,
  dispose: () => {}
}

/** How one stored tensor becomes one of our parameters. */
interface Target {
  readonly name: string
  readonly shape: ReadonlyArray<number>
  /** [out, in] in the file when `transpose`. */
  readonly stored: ReadonlyArray<number>
  readonly transpose: boolean
}

const FLOAT_DTYPES: ReadonlyArray<string> = ["F32", "BF16", "F16"]

/**
 * Reads the weights of a Hugging Face model directory for `config`: every parameter present
 * with the shape the config implies, no tensor left over (but a tied `lm_head.weight`, which
 * some files repeat, and RoPE buffers).
 */
export const readHfWeights = (dir: string, config: ModelConfig): Promise<Weights> => readHfParameters(dir, config, arraySink)

/**
 * `readHfWeights` into destinations of the caller's (`sink`). Everything the headers can tell —
 * missing, misshapen, unexpected tensors, dtypes, the recorded version — is checked before any
 * data is read; then each file is read once, in file order (its checksum computed on the way),
 * every chunk converted (and, for "inOut", transposed) straight into its destination: no fresh
 * array per tensor. `layout`: how the linear layers' matrices are wanted (matrixLayout.ts).
 */
export const readHfParameters = async <T>(dir: string, config: ModelConfig, sink: WeightSink<T>, layout: MatrixLayout = "inOut"): Promise<Record<string, T>> => {
  const shards = await shardMap(dir)
  const fileOf = (hf: string) => shards.get(hf) ?? (shards.size === 0 ? HF_WEIGHTS_FILE : undefined)
  const readers = new Map<string, SafetensorsReader>()
  const open = async (file: string) => {
    let r = readers.get(file)
    if (r === undefined) {
      const full = path.join(dir, file)
      try {
        r = await SafetensorsReader.open(full)
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code
        throw new HfWeightsError(full, code === "ENOENT" ? (shards.size > 0 ? `missing shard (named by ${HF_INDEX_FILE})` : "missing") : (e as Error).message)
      }
      readers.set(file, r)
    }
    return r
  }
  const out = new Map<string, T>()
  try {
    const plan = new Map<string, Map<string, Target>>() // file → stored name → target
    const expected = new Set<string>()
    const shapes = parameterShapes(config)
    const held = storedShapes(config, layout)
    for (const [name, shape] of Object.entries(shapes)) {
      const { hf, transpose: t } = hfName(name)
      expected.add(hf)
      const file = fileOf(hf)
      if (file === undefined) throw new HfWeightsError(path.join(dir, HF_INDEX_FILE), `does not name a shard for tensor ${hf}`)
      const reader = await open(file)
      const full = path.join(dir, file)
      const header = reader.header.tensors.get(hf)
      if (header === undefined) throw new HfWeightsError(full, `missing tensor ${hf}`)
      const stored = t ? [shape[1]!, shape[0]!] : shape
      if (header.shape.join(",") !== stored.join(",")) {
        throw new HfWeightsError(full, `tensor ${hf} is [${header.shape.join(", ")}], config.json implies [${stored.join(", ")}]`)
      }
      if (!FLOAT_DTYPES.includes(header.dtype)) throw new HfWeightsError(full, `tensor ${hf}: dtype ${header.dtype} is not a float format this loader converts (F32, BF16, F16)`)
      if (!plan.has(file)) plan.set(file, new Map())
      plan.get(file)!.set(hf, { name, shape: held[name]!, stored, transpose: t && layout === "inOut" })
    }
    // Every tensor of the files must be one the model uses.
    if (config.tieEmbeddings) expected.add("lm_head.weight")
    const files = shards.size > 0 ? [...new Set(shards.values())] : [HF_WEIGHTS_FILE]
    for (const file of files) {
      const reader = await open(file)
      // reins records the policy version in both files; config.json is written last, so a save
      // interrupted between the two leaves them disagreeing.
      const version = reader.header.metadata["version"]
      if (version !== undefined && Number(version) !== config.version) {
        throw new HfWeightsError(path.join(dir, file), `holds policy version ${version} but config.json says ${config.version} (a save was interrupted?)`)
      }
      for (const name of reader.header.tensors.keys()) {
        if (!expected.has(name) && !IGNORED.test(name)) throw new HfWeightsError(path.join(dir, file), `unexpected tensor ${name} (config.json does not use it)`)
      }
    }
    // Every header check has passed: only now is anything the size of the weights allocated.
    sink.reserve?.(parameterCount(config))
    let converted = new Float32Array(0) // a transposed chunk's float32 values before the transpose
    for (const file of files) {
      const targets = plan.get(file) ?? new Map<string, Target>()
      const reader = await open(file)
      try {
        await reader.scan((hf) => targets.has(hf), (hf, tensor, bytes, first) => {
          const target = targets.get(hf)!
          let dest = out.get(target.name)
          if (dest === undefined) out.set(target.name, (dest = sink.alloc(target.name, target.shape)))
          const stored = typedValues(bytes, tensor.dtype, true)
          const n = stored.length
          if (!target.transpose) {
            toF32(tensor.dtype, stored, sink.values(dest).subarray(first, first + n))
            return
          }
          if (converted.length < n) converted = new Float32Array(n)
          const values = tensor.dtype === "F32" ? (stored as Float32Array) : toF32(tensor.dtype, stored, converted.subarray(0, n))
          const [rows, cols] = target.stored as [number, number]
          // Rows first / cols.. of the stored [rows, cols] matrix, into its transpose [cols, rows].
          if (sink.transpose !== undefined) sink.transpose(dest, values, n / cols, cols, rows, first / cols)
          else transposeInto(values, sink.values(dest), n / cols, cols, rows, first / cols)
        })
      } catch (e) {
        throw new HfWeightsError(path.join(dir, file), (e as Error).message)
      }
    }
    // Tensors with no elements were never visited.
    for (const [name, shape] of Object.entries(held)) if (!out.has(name)) out.set(name, sink.alloc(name, shape))
    return Object.fromEntries(out)
  } catch (e) {
    for (const dest of out.values()) sink.dispose(dest)
    throw e
  } finally {
    sink.close?.()
    await Promise.all([...readers.values()].map((r) => r.close()))
  }
}

/** The safetensors bytes of `weights` in Hugging Face names, layout and `dtype`. */
export const encodeHfWeights = (config: ModelConfig, weights: Weights, dtype: HfDtype, metadata: Record<string, string> = {}): Uint8Array => {
  const tensors: Record<string, TensorEntry> = {}
  for (const [name, shape] of Object.entries(parameterShapes(config))) {
    const { hf, transpose: t } = hfName(name)
    const values = t ? transpose(weights[name]!, shape[0]!, shape[1]!) : weights[name]!
    const stored = t ? [shape[1]!, shape[0]!] : shape
    tensors[hf] =
      dtype === "float32"
        ? { dtype: "F32", shape: stored, data: values }
        : { dtype: dtype === "bfloat16" ? "BF16" : "F16", shape: stored, data: dtype === "bfloat16" ? f32ToBf16(values) : f32ToF16(values) }
  }
  return encodeSafetensors(tensors, { format: "pt", ...metadata })
}
