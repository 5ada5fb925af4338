export * from "./tokenizer/index.js"
export * from "./chat/index.js"
export { initBackend, BackendError, BACKENDS, type BackendName } from "./backend.js"
export { takeGpuErrors } from "./gpuErrors.js"
export { Rng, randomSeed } from "./random.js"
export { ModelConfig, makeConfig, defaultFfWidth, parameterShapes, parameterCount, forwardFlops, RopeScaling } from "./model/config.js"
export { Transformer, type TokenBatch } from "./model/transformer.js"
export { segmentStarts } from "./model/attention.js"
export { defaultProducts, type MatrixLayout, type ProductsKind, storedShapes } from "./model/matrixLayout.js"
export { WeightsError, initWeights, checkWeights, type Weights } from "./model/weights.js"
export { DecodeWeights, FastDecoder, KvCache, type Chunk as DecodeChunk, type GemmKind } from "./model/fastDecode.js"
export { defaultGemm } from "./model/decodeWeights.js"
export { heapGemm, heapGemmAvailable, heapGemmInto, heapGemmNt, heapGemmNtInto } from "./model/gemmKernel.js"
export { reserveHeap, uninitialized } from "./model/heap.js"
export { transpose, transposeInto } from "./model/transpose.js"
export { HeapTransposer } from "./model/transposeKernel.js"
export { KvRows, RowRanges, TensorKvCache, type TensorChunk } from "./model/kvRows.js"
export { WebGpuDecoder, webgpuDecodeUnsupported } from "./model/webgpuDecode.js"
export { readDraw, type Pick, type StepRow, type StepRows } from "./model/deviceDraw.js"
export { ropeTable, type RopeTable } from "./model/ops.js"
export { defaultModelConfig, initModelDir, ensureModelDir, type InitModelDirOptions } from "./model/defaults.js"
export { packSequences, unpack, PackingError, type TrainingSequence, type MicroBatch, type PackOptions, type Placement } from "./train/microbatch.js"
export { sftLoss, policyGradientLoss, pgStats, DEFAULT_PG, type Objective, type PgSettings, type PgStats, type LossOutput } from "./train/losses.js"
export { AdamW, OptimizerError, schedule, type Schedule, type ScheduleOptions, type AdamWOptions, type UpdateStats } from "./train/optimizer.js"
export { trainStep, microBatchGradients, scoreSequences } from "./train/step.js"
export { encodeSafetensors, decodeSafetensors, SafetensorsReader, SafetensorsError, type TensorEntry, type SafetensorsFile, type DType } from "./checkpoint/safetensors.js"
export { ChecksumThread } from "./checkpoint/checksumThread.js"
export { bf16ToF32, f32ToBf16, f16ToF32, f32ToF16 } from "./checkpoint/dtype.js"
export { decodeHfConfig, encodeHfConfig, HfConfigError, HF_ARCHITECTURES, type HfArchitecture, type HfDtype, type HfModelConfig } from "./checkpoint/hf/config.js"
export { LoraConfig, LORA_TARGETS, loraSites, initAdapters, mergeAdapters, type LoraTarget, type LoraSite } from "./model/lora.js"
export { writePeftAdapter, readPeftAdapter, PeftError, ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE } from "./checkpoint/hf/peft.js"
export { asHfModel, isHfConfig } from "./checkpoint/hf/hfModel.js"
export { fitMicroBatchTokens, memoryNeed, rollbackFitsOnDevice, trainingBytesPerToken, wasmMicroBatchMisfit, wasmMisfit, wasmPacksWeights, WASM_HEAP_BYTES, WASM_TENSOR_SHARE, type MemoryNeed, type MicroBatchFit, type TrainingShape } from "./model/memory.js"
export { backendMemory, type BackendMemory, kvCacheBytes, microBatchFit, nvidiaGpuBytes } from "./backendMemory.js"
export { readHfWeights, readHfParameters, type WeightSink, encodeHfWeights, hfName, HfWeightsError, HF_WEIGHTS_FILE, HF_INDEX_FILE } from "./checkpoint/hf/weights.js"
export {
  loadModelDir,
  readModelConfig,
  saveModelDir,
  loadModel,
  saveModel,
  saveOptimizerState,
  loadOptimizerState,
  CheckpointError,
  GenerationConfig,
  CONFIG_FILE,
  WEIGHTS_FILE,
  GENERATION_CONFIG_FILE,
  OPTIMIZER_FILE,
  readAdapterConfig,
  type ModelDir,
  type OptimizerState
} from "./checkpoint/modelDir.js"
export { Sampler, logSoftmax, topIndices, type SamplerSettings, type Sampled } from "./engine/sampler.js"
export { StopMatcher } from "./engine/stops.js"
export { FastEngineDecoder, DeviceEngineDecoder, type Decoder, type DecoderCache, type DeviceDecoder, type WeightSource } from "./engine/decoder.js"
export { Scheduler, EngineError, type SequenceState, type SchedulerOptions, type SchedulerStats } from "./engine/scheduler.js"
export type { Sink } from "./engine/sequence.js"
export { makeEngine, Engine, generateAll, collectChunks, defaultDecoder, type DecoderKind, type DeviceDecoderFactory, type EngineOptions, type EngineStats, type GenerationEngine, type Generation } from "./engine/engine.js"
export * from "./device/index.js"
