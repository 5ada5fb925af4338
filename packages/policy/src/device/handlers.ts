/**
 * The device actor's handlers, run in its worker thread: load the model, start the engine, and
 * train, score, swap, save and restore weights on it.
 *
 * Weight changes (Train, SetWeights, Restore) and reads of the model (Score, GetWeights, Save)
 * run one at a time. Generation does not wait for them: the engine decodes from its own snapshot
 * of the weights, which changes only at a swap. A swap interrupts live sequences at a token
 * boundary, sets the weights and resumes them (their next tokens carry the new version) — unless
 * the caller paused the device, which then stays paused until the caller resumes it.
 */
import { DeviceError, DeviceInfo, EngineLoad, type PauseMode, RestoreResult, SaveResult, ScoreResult, type TrainRequest, TrainResult } from "@reins/protocol"
import { Effect, Exit, Stream } from "effect"
import { existsSync } from "node:fs"
import path from "node:path"
import { initBackend } from "../backend.js"
import { takeGpuErrors } from "../gpuErrors.js"
import { backendMemory, kvCacheBytes, microBatchFit } from "../backendMemory.js"
import { loadModel, readModelConfig } from "../checkpoint/modelDir.js"
import type { WeightSource } from "../engine/decoder.js"
import { defaultDecoder, makeEngine } from "../engine/engine.js"
import type { ModelConfig } from "../model/config.js"
import { initAdapters, LoraConfig } from "../model/lora.js"
import { rollbackFitsOnDevice, wasmMicroBatchMisfit, wasmMisfit } from "../model/memory.js"
import { webgpuDecodeUnsupported } from "../model/webgpuDecode.js"
import { Transformer } from "../model/transformer.js"
import { scoreSequences } from "../train/step.js"
import { BusyClock } from "./busyClock.js"
import { checkWeightsMessage, readCheckpointDir, saveCheckpointDir, weightsMessage } from "./checkpoint.js"
import { readLoraCheckpointDir, saveLoraCheckpointDir } from "./loraCheckpoint.js"
import { DEFAULT_MODEL_ID, ensureDefaultPolicy } from "./defaultPolicy.js"
import { optimizerRollback, type RollbackPoint, type RollbackWhere, trainingRollback } from "./rollback.js"
import { Device, type DeviceOptions } from "./Device.js"
import {
  checkIds,
  checkTrainRequest,
  DeviceOptimizer,
  gpuFailure,
  packSteps,
  runSteps,
  withOldLogprobs
} from "./training.js"

const deviceError = (e: { readonly message: string }) => new DeviceError({ message: e.message })

/** Any thrown value as a `DeviceError` (ours pass through). */
const asDeviceError = (prefix: string) => (e: unknown): DeviceError =>
  e instanceof DeviceError ? e : new DeviceError({ message: `${prefix}: ${e instanceof Error ? e.message : String(e)}` })

/**
 * Work on the backend, not left running when its caller goes away: its promise cannot be stopped,
 * and left running it would share the device with the next call (training.ts `runSteps` says why
 * that matters for a step). An interruption takes effect when it ends.
 */
const onBackend = <A>(what: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: asDeviceError(what) }).pipe(Effect.uninterruptible)

const webgpuRefusal = (config: ModelConfig): string | undefined => {
  const unsupported = webgpuDecodeUnsupported(config)
  return unsupported === undefined ? undefined : `the WebGPU decoder cannot run this model (${unsupported}); serve it on the wasm backend (REINS_BACKEND=wasm)`
}

/**
 * The device's model: read from its directory straight into the backend's memory (checkpoint/
 * modelDir.ts `loadModel`: no copy of the weights in JS first), or the default policy, written
 * first where none is.
 */
const loadPolicy = (options: DeviceOptions, written: boolean) =>
  (written
    ? loadModel(options.modelDir)
    : ensureDefaultPolicy(options.modelDir).pipe(Effect.map(({ weights, ...rest }) => ({ ...rest, model: Transformer.fromWeights(rest.config, weights) })))
  ).pipe(Effect.mapError(deviceError))

/** The device's handlers: loads the model, starts the engine, serves it until the scope closes. */
export const deviceHandlers = (options: DeviceOptions) =>
  Effect.gen(function*() {
    const backend = yield* Effect.tryPromise({
      try: () => initBackend(options.backend),
      catch: (e) => new DeviceError({ message: `no TensorFlow.js backend: ${String(e)}` })
    })
    const memory = yield* Effect.try({ try: () => backendMemory(backend), catch: asDeviceError("device memory") })
    // The GPU's decode path keeps the caches on the device, the CPU's in its own wasm memory.
    const kvBytes = options.kvBytes ??
      (yield* Effect.try({ try: () => kvCacheBytes(process.env, defaultDecoder() !== "fast" ? memory : undefined), catch: asDeviceError("KV memory") }))
    if (memory.source.startsWith("assumed")) yield* Effect.logWarning(`the ${backend} backend's memory is ${memory.source}: ${memory.bytes / 1024 ** 3} GiB`)
    /** A model too large for the wasm heap, or of sizes WebGPU's shaders do not take, fails saying why. */
    const refuse = (config: ModelConfig) => {
      const refusal = backend === "wasm"
        ? wasmMisfit(config, { lora: options.lora !== undefined, serveOnly: options.serveOnly === true, heapBytes: memory.bytes })
        : backend === "webgpu"
        ? webgpuRefusal(config)
        : undefined
      return refusal === undefined ? Effect.void : Effect.fail(new DeviceError({ message: `${options.modelDir}: ${refusal}` }))
    }
    // Before any weight is read; a default policy not yet written is checked once it is.
    const written = !options.createDefault || existsSync(path.join(options.modelDir, "config.json"))
    if (written) yield* refuse(yield* readModelConfig(options.modelDir).pipe(Effect.mapError(deviceError)))
    const policy = yield* loadPolicy(options, written)
    const model = policy.model
    yield* Effect.addFinalizer(() => Effect.sync(() => model.dispose()))
    if (!written) yield* refuse(policy.config)
    /** A serving-only device whose model would not fit for the training pass: Train and Score fail with this. */
    const trainingRefusal = options.serveOnly === true && backend === "wasm" ? wasmMisfit(policy.config, { lora: options.lora !== undefined, heapBytes: memory.bytes }) : undefined
    const refuseTraining = (what: string) =>
      trainingRefusal === undefined ? Effect.void : Effect.fail(new DeviceError({ message: `${what}: this device only serves ${options.modelDir}, which fits the wasm backend for that alone: ${trainingRefusal}` }))
    const lora = options.lora === undefined ? undefined : yield* Effect.try({
      try: () => {
        const config = new LoraConfig(options.lora as ConstructorParameters<typeof LoraConfig>[0])
        model.attachLora(config, initAdapters(model.config, config, 0))
        return config
      },
      catch: asDeviceError("LoRA")
    })
    const shape = (seqLen: number) => ({ seqLen, lora: lora !== undefined, inPlace: model.products === "heap" })
    /**
     * Where a rollback point (rollback.ts) is kept while the change it guards runs: on the device
     * where its memory holds it beside the change's micro-batch (rows of `seqLen`; `tokens` when the
     * request fixes it), else on the host.
     */
    const rollbackWhere = (seqLen: number, tokens?: number): RollbackWhere =>
      rollbackFitsOnDevice(model.config, { memoryBytes: memory.bytes, ...shape(seqLen), tokens }) ? "device" : "host"
    const rollbackPoint = (what: string, take: () => Promise<RollbackPoint>) =>
      Effect.acquireRelease(onBackend(what, take), (point) => Effect.sync(() => point.dispose()))
    const engine = yield* makeEngine({
      model,
      tokenizer: policy.tokenizer,
      stopIds: policy.generationConfig.eosTokenIds,
      kvBytes
    })
    const optimizer = new DeviceOptimizer(model)
    yield* Effect.addFinalizer(() => Effect.sync(() => optimizer.dispose()))
    const modelId = options.modelId ??
      (options.createDefault ? DEFAULT_MODEL_ID : path.basename(path.resolve(options.modelDir)))
    const clock = new BusyClock()
    const exclusive = (yield* Effect.makeSemaphore(1)).withPermits(1)
    const contextLength = policy.config.contextLength
    /** Padded tokens per micro-batch for rows of `seqLen`, from the backend's memory (less a rollback point kept beside it). */
    const microBatchTokens = (seqLen: number, where?: RollbackWhere) => microBatchFit(model.config, memory, { ...shape(seqLen), rollbackOnDevice: where === "device" }).tokens
    /** A Train's micro-batch the wasm heap would not hold (running out of it would end the backend), refused up front. */
    const oversized = (steps: ReturnType<typeof packSteps>, where: RollbackWhere) =>
      Effect.forEach(backend === "wasm" ? steps.flat() : [], (batch) => {
        const misfit = wasmMicroBatchMisfit(model.config, batch.rows, { ...shape(batch.seqLen), rollbackOnDevice: where === "device", heapBytes: memory.bytes })
        return misfit === undefined ? Effect.void : Effect.fail(new DeviceError({ message: `Train: ${misfit}` }))
      }, { discard: true })
    /** At the full context: what Info reports and Score packs by (fixed for the device's life). */
    const contextMicroBatchTokens = microBatchTokens(contextLength)
    if (engine.maxSequenceTokens === 0) {
      return yield* new DeviceError({ message: `the KV memory (${kvBytes} bytes, REINS_KV_CACHE_MB) cannot hold one 64-token block of this model's cache: give it more` })
    }
    if (engine.maxSequenceTokens < contextLength) {
      yield* Effect.logWarning(
        `the KV memory holds ${engine.maxSequenceTokens} tokens per sequence, less than the model's context of ${contextLength}: calls are served up to ${engine.maxSequenceTokens} tokens`
      )
    }
    /** The version the engine serves (and the model's weights are, outside a Train). */
    let version = model.version
    /** The caller paused the device (Pause without Resume yet): a swap must not resume it. */
    let pausedByCaller = false

    /** Puts weights into the engine as `v`: interrupt → set → resume, or just set if the caller paused. */
    const swap = (v: number, source: WeightSource) =>
      Effect.suspend(() =>
        pausedByCaller
          ? engine.setWeights(v, source)
          : engine.interrupt.pipe(Effect.zipRight(engine.setWeights(v, source)), Effect.ensuring(engine.resume))
      ).pipe(
        Effect.tap(() => {
          version = v
          model.version = v
        }),
        Effect.mapError(deviceError),
        Effect.uninterruptible
      )

    const train = (request: TrainRequest) =>
      Effect.gen(function*() {
        const started = performance.now()
        const { settings } = request
        const checked = yield* Effect.try({ try: () => checkTrainRequest(request, model.config), catch: asDeviceError("Train") })
        const where = rollbackWhere(settings.maxSeqLen, settings.microBatchTokens)
        const packing = { maxTokens: settings.microBatchTokens ?? microBatchTokens(settings.maxSeqLen, where), maxSeqLen: settings.maxSeqLen }
        // Before π_old is scored: the same rows, packed the same way.
        yield* oversized(yield* Effect.try({ try: () => packSteps(checked, packing), catch: asDeviceError("Train") }), where)
        // The wire's objective is the loss's own shape (`Objective`).
        const objective = settings.objective
        const earlier = takeGpuErrors()
        if (earlier !== undefined) yield* Effect.logWarning(`the GPU reported errors since the last Train or Score, outside them: ${earlier}`)
        const before = yield* rollbackPoint("Train", () => trainingRollback(model, optimizer, where))
        // Until the engine took the new weights, a failure or the caller going away rolls back.
        const steps = yield* Effect.gen(function*() {
          const adam = yield* Effect.try({ try: () => optimizer.configure(settings), catch: asDeviceError("Train") })
          // π_old for the PPO ratio: exact without it for the first step only
          const sequences = objective.kind === "pg" && checked.length > 1
            ? yield* onBackend("Train: scoring π_old", () => withOldLogprobs(model, checked, packing))
            : checked
          const batches = yield* Effect.try({ try: () => packSteps(sequences, packing), catch: asDeviceError("Train") })
          const stats = yield* runSteps(model, adam, batches, objective)
          yield* swap(version + 1, model)
          return stats
        }).pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => before.restore()))))
        return new TrainResult({ version, steps, seconds: (performance.now() - started) / 1000 })
      }).pipe(Effect.scoped)

    /** Train, counted as training time in the busy clock. */
    const timedTrain = (request: Parameters<typeof train>[0]) =>
      Effect.acquireUseRelease(
        Effect.sync(() => clock.trainingStarted()),
        () => train(request),
        () => Effect.sync(() => clock.trainingEnded())
      )

    return Device.of({
      Info: () =>
        Effect.map(engine.stats, ({ running, waiting, held, steps, generatedTokens, parked }) =>
          new DeviceInfo({
            modelId,
            modelDir: path.resolve(options.modelDir),
            contextLength: Math.min(contextLength, engine.maxSequenceTokens),
            defaultMaxTokens: policy.generationConfig.maxNewTokens,
            version,
            backend,
            memoryBytes: memory.bytes,
            microBatchTokens: contextMicroBatchTokens,
            ...clock.read(),
            engine: new EngineLoad({ running, waiting, held, steps, generatedTokens, parked })
          })
        ),
      Generate: (request) =>
        Stream.unwrapScoped(
          Effect.acquireRelease(Effect.sync(() => clock.generationStarted()), () => Effect.sync(() => clock.generationEnded())).pipe(
            Effect.as(Stream.mapError(engine.generate(request), deviceError))
          )
        ),
      Pause: ({ mode }: { readonly mode: PauseMode }) =>
        Effect.suspend(() => {
          pausedByCaller = true
          return engine.pause(mode)
        }).pipe(Effect.tap(() => clock.setPaused(true)), Effect.asVoid),
      Resume: () =>
        Effect.suspend(() => {
          pausedByCaller = false
          clock.setPaused(false)
          return engine.resume
        }),
      Train: (request) => Effect.zipRight(refuseTraining("Train"), exclusive(timedTrain(request))),
      Score: ({ sequences }) =>
        Effect.zipRight(refuseTraining("Score"), exclusive(onBackend("Score", async () => {
          sequences.forEach((tokens, i) => {
            checkIds(tokens, model.config.vocabSize, `Score: sequence ${i}`)
            if (tokens.length - 1 > contextLength) {
              throw new DeviceError({ message: `Score: sequence ${i} has ${tokens.length} tokens; the model's context is ${contextLength}` })
            }
          })
          const scored = await scoreSequences(model, sequences.map((tokens) => ({ tokens, weights: new Float32Array(tokens.length) })), {
            maxTokens: contextMicroBatchTokens,
            maxSeqLen: contextLength
          })
          const failed = gpuFailure("Score")
          if (failed !== undefined) throw failed
          for (const lp of scored) if (lp.length > 0) lp[0] = 0
          return new ScoreResult({ version, logprobs: scored })
        }))),
      GetWeights: () => exclusive(onBackend("GetWeights", () => weightsMessage(model, version))),
      SetWeights: (message) =>
        exclusive(Effect.gen(function*() {
          if (lora !== undefined) return yield* new DeviceError({ message: "SetWeights: this device trains LoRA adapters; it serves its own merged weights" })
          const weights = yield* Effect.try({ try: () => checkWeightsMessage(model, message), catch: asDeviceError("SetWeights") })
          // the engine first: if it fails, nothing changed; once it took them, so does the model
          yield* swap(message.version, weights).pipe(
            Effect.zipRight(Effect.sync(() => model.setWeights(weights, message.version))),
            Effect.uninterruptible
          )
        })),
      Save: ({ dir, optimizer: withOptimizer }) =>
        exclusive(Effect.gen(function*() {
          const state = withOptimizer ? yield* onBackend("Save", async () => optimizer.current?.exportState()) : undefined
          if (lora !== undefined) yield* saveLoraCheckpointDir(dir, model, { version, baseModel: options.modelDir, optimizer: state })
          else {
            const weights = yield* onBackend("Save", () => model.readWeightsAsync())
            yield* saveCheckpointDir(dir, { ...policy, config: policy.config.withVersion(version), weights }, state)
          }
          return new SaveResult({ dir: path.resolve(dir), version, optimizer: state !== undefined })
        })),
      Restore: ({ dir, version: requested }) =>
        exclusive(Effect.gen(function*() {
          if (lora !== undefined) {
            const checkpoint = yield* readLoraCheckpointDir(model, lora, dir)
            const v = requested ?? checkpoint.version
            const before = yield* rollbackPoint("Restore", () => trainingRollback(model, optimizer, "device")) // adapters: small
            // Restored and taken by the engine, or put back: not left half-way, even if the caller goes away.
            yield* Effect.try({
              try: () => {
                optimizer.restore(checkpoint.optimizer)
                model.setAdapters(checkpoint.adapters)
              },
              catch: asDeviceError("Restore")
            }).pipe(Effect.zipRight(swap(v, model)), Effect.tapError(() => Effect.sync(() => before.restore())), Effect.uninterruptible)
            return new RestoreResult({ version: v, optimizer: checkpoint.optimizer !== undefined })
          }
          const checkpoint = yield* readCheckpointDir(model, dir)
          const v = requested ?? checkpoint.version
          // The weights are set only once the engine took them: the optimizer is all a failure undoes.
          // no activations beside it: where a Train's shortest micro-batch would fit
          const before = yield* rollbackPoint("Restore", () => optimizerRollback(optimizer, rollbackWhere(8)))
          yield* Effect.try({ try: () => optimizer.restore(checkpoint.optimizer), catch: asDeviceError("Restore") }).pipe(
            Effect.zipRight(swap(v, checkpoint.weights)),
            Effect.tapError(() => Effect.sync(() => before.restore())),
            Effect.zipRight(Effect.sync(() => model.setWeights(checkpoint.weights, v))),
            Effect.uninterruptible
          )
          return new RestoreResult({ version: v, optimizer: checkpoint.optimizer !== undefined })
        }).pipe(Effect.scoped))
    })
  })
