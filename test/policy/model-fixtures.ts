/**
 * Shared pieces of the model, training, checkpoint and engine tests: the tfjs backend (wasm, as
 * in production here), tiny configs so the suite stays fast, a tiny tokenizer, and the tfjs
 * reference computations the fast paths are checked against.
 */
import { type DecodeWeights, FastDecoder, initBackend, makeConfig, type ModelConfig, type Tokenizer, trainBpe, type Transformer } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"

/** Initialised at import, before any describe body creates a model (tfjs would default to cpu). */
export const BACKEND = await initBackend()
export const backend = () => initBackend()

/** d_model 32, 2 layers of 4 heads: small enough for hundreds of steps in a test. */
export const tinyConfig = (vocabSize: number, overrides: Partial<Parameters<typeof makeConfig>[0]> = {}): ModelConfig =>
  makeConfig({ vocabSize, dModel: 32, nLayers: 2, nHeads: 4, dFf: 64, contextLength: 64, ...overrides })

/** The Llama family's other options, all at once: GQA, biases on q/k/v/o, Qwen3's q/k norms, an untied head. */
export const variantConfig = (vocabSize: number): ModelConfig =>
  tinyConfig(vocabSize, { nKvHeads: 2, qkvBias: true, oBias: true, qkNorm: true, tieEmbeddings: false })

const CORPUS =
  "the cat sat on the mat. the dog sat on the log. a bird sang in the tree. " +
  "the agent reads the tool result and answers. <|im_start|>user\nhello<|im_end|>\n"

let tokenizer: Tokenizer | undefined
/** A byte-level BPE with a few merges and the default special tokens. */
export const tinyTokenizer = (): Tokenizer => (tokenizer ??= trainBpe(CORPUS.repeat(4), { vocabSize: 300 }))

/** Full-recompute logits [ids.length, vocab] of one sequence with the tfjs forward pass. */
export const referenceLogits = (model: Transformer, ids: Int32Array): Float32Array => {
  const n = ids.length
  const logits = model.forward({
    rows: 1,
    seqLen: n,
    inputIds: ids,
    positions: Int32Array.from({ length: n }, (_, i) => i),
    segments: new Int32Array(n)
  })
  const out = logits.dataSync() as Float32Array
  const copy = new Float32Array(out)
  logits.dispose()
  return copy
}

export const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`)
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!))
  return m
}

/** log softmax(row / τ) at `id`, in double precision. */
export const logSoftmaxAt = (row: ArrayLike<number>, id: number, temperature = 1): number => {
  const t = temperature > 0 ? temperature : 1
  let max = -Infinity
  for (let i = 0; i < row.length; i++) max = Math.max(max, row[i]! / t)
  let sum = 0
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! / t - max)
  return row[id]! / t - max - Math.log(sum)
}

export const numTensors = () => tf.memory().numTensors

/**
 * The fast decoder's logits over a snapshot (disposed after): every row of a prefill of all of
 * `ids` but the last (on wasm with 10 tokens: 4-row tiles and left-over rows), then the last
 * token alone (the one-row path).
 */
export const prefillThenStep = (weights: DecodeWeights, ids: Int32Array): Array<number> => {
  const decoder = new FastDecoder(weights)
  const cache = decoder.newCache(32)
  const prefill = decoder.forward([{ cache, ids: ids.subarray(0, ids.length - 1) }], "all").slice()
  const step = decoder.forward([{ cache, ids: ids.subarray(ids.length - 1) }], "last").slice()
  decoder.freeCache(cache)
  decoder.dispose()
  weights.dispose()
  return [...prefill, ...step]
}
