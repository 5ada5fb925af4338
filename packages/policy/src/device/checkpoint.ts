/**
 * Device checkpoints: a whole model directory (+ optimizer state) written next to its final place
 * under a temporary name and renamed into it, so a crash mid-save never leaves a half-written
 * directory under the final name; and the checks a restore needs before it touches anything.
 */
import { DeviceError, DeviceWeights, WeightTensor } from "@reins/protocol"
import { Effect } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { loadModelDir, loadOptimizerState, type ModelDir, type OptimizerState, saveModelDir, saveOptimizerState } from "../checkpoint/modelDir.js"
import { type ModelConfig, parameterShapes } from "../model/config.js"
import type { Transformer } from "../model/transformer.js"
import type { Weights } from "../model/weights.js"

const reason = (e: unknown): string => (e instanceof Error ? e.message : String(e))

const randomSuffix = () => `${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`

const io = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (e) => new DeviceError({ message: `${what}: ${reason(e)}` }) })

/**
 * Writes the directory `dir` with `write`: first into a sibling `.NAME.partial-*`, then renamed
 * into place. An existing `dir` is moved aside first and removed after; a crash between the two
 * renames leaves it as `.NAME.old-*`, never half-written.
 */
export const writeDirAtomically = (dir: string, write: (tmp: string) => Effect.Effect<void, DeviceError>): Effect.Effect<void, DeviceError> => {
  const target = path.resolve(dir)
  const parent = path.dirname(target)
  const name = path.basename(target)
  const tmp = path.join(parent, `.${name}.partial-${randomSuffix()}`)
  const all = Effect.gen(function*() {
    yield* io(`Save: cannot create ${parent}`, () => fs.mkdir(parent, { recursive: true }))
    // what an earlier save of this name left when it was killed mid-write
    const stale = (yield* io(`Save: cannot list ${parent}`, () => fs.readdir(parent))).filter((f) => f.startsWith(`.${name}.partial-`))
    for (const f of stale) yield* io(`Save: cannot remove ${f}`, () => fs.rm(path.join(parent, f), { recursive: true, force: true }))
    yield* write(tmp)
    const old = path.join(parent, `.${name}.old-${randomSuffix()}`)
    const moved = yield* io(`Save: cannot move the existing ${target} aside`, () =>
      fs.rename(target, old).then(
        () => true,
        (e: NodeJS.ErrnoException) => {
          if (e.code === "ENOENT") return false
          throw e
        }
      ))
    yield* io(`Save: cannot rename ${tmp} to ${target}`, () => fs.rename(tmp, target)).pipe(
      // put the previous checkpoint back rather than leave no directory at all
      Effect.tapError(() => (moved ? Effect.promise(() => fs.rename(old, target).catch(() => undefined)) : Effect.void))
    )
    if (moved) yield* io(`Save: cannot remove the previous ${target}`, () => fs.rm(old, { recursive: true, force: true }))
  })
  return all.pipe(Effect.onError(() => Effect.promise(() => fs.rm(tmp, { recursive: true, force: true }).catch(() => undefined))))
}

/** Writes `contents` (and `optimizer` when given) as the model directory `dir`, atomically. */
export const saveCheckpointDir = (
  dir: string,
  contents: ModelDir,
  optimizer: OptimizerState | undefined
): Effect.Effect<void, DeviceError> =>
  writeDirAtomically(dir, (tmp) =>
    Effect.gen(function*() {
      yield* saveModelDir(tmp, contents).pipe(Effect.mapError((e) => new DeviceError({ message: `Save: ${e.message}` })))
      if (optimizer !== undefined) {
        yield* saveOptimizerState(tmp, optimizer, contents.config.version).pipe(Effect.mapError((e) => new DeviceError({ message: `Save: ${e.message}` })))
      }
    }))

/** Throws `DeviceError` unless `config` describes the same parameters (names and shapes) as the model's. */
const checkArchitecture = (model: Transformer, config: ModelConfig, dir: string): void => {
  const theirs = parameterShapes(config)
  const ours = parameterShapes(model.config)
  for (const [name, shape] of Object.entries(ours)) {
    const other = theirs[name]
    if (other === undefined) throw new DeviceError({ message: `Restore: ${dir} has no parameter ${name}: its architecture differs from the device's model` })
    if (other.join(",") !== shape.join(",")) {
      throw new DeviceError({
        message: `Restore: ${dir} has ${name} [${other.join(", ")}], the device's model needs [${shape.join(", ")}]`
      })
    }
  }
  for (const name of Object.keys(theirs)) {
    if (!(name in ours)) throw new DeviceError({ message: `Restore: ${dir} has parameter ${name}, which the device's model does not` })
  }
}

/** Reads and checks a checkpoint for this model: weights, its recorded version, optimizer state if any. */
export const readCheckpointDir = (
  model: Transformer,
  dir: string
): Effect.Effect<{ readonly weights: Weights; readonly version: number; readonly optimizer: OptimizerState | undefined }, DeviceError> =>
  Effect.gen(function*() {
    const loaded = yield* loadModelDir(dir).pipe(Effect.mapError((e) => new DeviceError({ message: `Restore: ${e.message}` })))
    yield* Effect.try({ try: () => checkArchitecture(model, loaded.config, dir), catch: (e) => e as DeviceError })
    const optimizer = yield* loadOptimizerState(dir).pipe(Effect.mapError((e) => new DeviceError({ message: `Restore: ${e.message}` })))
    return { weights: loaded.weights, version: loaded.config.version, optimizer }
  })

/** The model's weights as they go on the wire (with LoRA: merged, as a server decodes them). */
export const weightsMessage = async (model: Transformer, version: number): Promise<DeviceWeights> => {
  const weights = await model.servingWeights()
  const shapes = parameterShapes(model.config) // [in, out], whatever layout the model holds its matrices in
  return new DeviceWeights({
    version,
    tensors: Object.entries(shapes).map(([name, shape]) => new WeightTensor({ name, shape: [...shape], data: weights[name]! }))
  })
}

/** Checks received weights against the model (exact names, shapes, finite values); returns them by name. */
export const checkWeightsMessage = (model: Transformer, message: DeviceWeights): Weights => {
  const fail = (m: string) => new DeviceError({ message: `SetWeights: ${m}` })
  const weights: Weights = {}
  const shapes = parameterShapes(model.config)
  for (const t of message.tensors) {
    const shape = shapes[t.name]
    if (shape === undefined) throw fail(`unknown tensor ${t.name} (the model has ${Object.keys(shapes).slice(0, 4).join(", ")}, …)`)
    if (t.name in weights) throw fail(`tensor ${t.name} is sent twice`)
    if (t.shape.join(",") !== shape.join(",")) throw fail(`tensor ${t.name} has shape [${t.shape.join(", ")}], the model needs [${shape.join(", ")}]`)
    const size = shape.reduce((a, b) => a * b, 1)
    if (t.data.length !== size) throw fail(`tensor ${t.name} has ${t.data.length} values for shape [${t.shape.join(", ")}] (${size})`)
    for (let i = 0; i < t.data.length; i++) {
      if (!Number.isFinite(t.data[i]!)) throw fail(`tensor ${t.name} has a non-finite value (${t.data[i]}) at ${i}`)
    }
    weights[t.name] = t.data
  }
  for (const name of Object.keys(shapes)) if (!(name in weights)) throw fail(`tensor ${name} is missing`)
  return weights
}
