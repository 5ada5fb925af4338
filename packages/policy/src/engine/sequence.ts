/**
 * One request's life in the scheduler: what it asked for, the tokens it has produced so far (ids,
 * logprobs, versions and alternatives, in buffers sized to its budget when it is submitted) and
 * how much of that has gone out to its sink. The scheduler decides when a sequence runs; this
 * file only keeps its output and cuts it into chunks.
 */
import { GenerateChunk, type FinishReason, type SamplingParams } from "@reins/protocol"
import type { Rng } from "../random.js"
import type { EngineError } from "./scheduler.js"
import type { Sampled } from "./sampler.js"
import type { StopMatcher } from "./stops.js"

/** Where a sequence's output goes. */
export interface Sink {
  /** A chunk of output; the last one has a `finishReason`. */
  chunk(c: GenerateChunk): void
  fail(e: EngineError): void
}

export interface Sequence<C> {
  readonly id: string
  readonly prompt: Int32Array
  readonly params: SamplingParams
  readonly sink: Sink
  readonly rng: Rng
  readonly stops: StopMatcher
  /** Tokens the sequence may still produce: min(max_tokens, context − prompt). */
  readonly budget: number
  /**
   * The first `count` entries: sampled ids, their logprobs and versions (and alternatives). A
   * chunk gets its own copy of its range (chunks cross threads and the wire, where a view would
   * drag the whole buffer along).
   */
  count: number
  readonly outIds: Int32Array
  readonly outLogprobs: Float32Array
  readonly outVersions: Int32Array
  /** [budget × topLogprobs] alternatives, when asked for. */
  readonly outTopIds: Int32Array
  readonly outTopLogprobs: Float32Array
  /** Tokens before this index have been emitted; when the last chunk went out. */
  emitted: number
  lastEmit: number
  cache: C | undefined
  cacheVersion: number
  /** Tokens to run through the model before the next sample. */
  pending: Int32Array
}

export const newSequence = <C>(
  fields: Pick<Sequence<C>, "id" | "prompt" | "params" | "sink" | "rng" | "stops" | "budget">
): Sequence<C> => {
  const { budget, params } = fields
  return {
    ...fields,
    count: 0,
    outIds: new Int32Array(budget),
    outLogprobs: new Float32Array(budget),
    outVersions: new Int32Array(budget),
    outTopIds: new Int32Array(budget * params.topLogprobs),
    outTopLogprobs: new Float32Array(budget * params.topLogprobs),
    emitted: 0,
    lastEmit: 0,
    cache: undefined,
    cacheVersion: -1,
    pending: fields.prompt
  }
}

/** Appends a sampled token, drawn under weights `version`. */
export const record = <C>(seq: Sequence<C>, s: Sampled, version: number): void => {
  const n = seq.count++
  seq.outIds[n] = s.id
  seq.outLogprobs[n] = s.logprob
  seq.outVersions[n] = version
  const k = seq.params.topLogprobs
  if (k > 0) {
    seq.outTopIds.set(s.topIds!, n * k)
    seq.outTopLogprobs.set(s.topLogprobs!, n * k)
  }
}

/** The prompt and every token sampled so far: what a cache rebuilt under new weights runs. */
export const allTokens = <C>(seq: Sequence<C>): Int32Array => {
  const all = new Int32Array(seq.prompt.length + seq.count)
  all.set(seq.prompt)
  all.set(seq.outIds.subarray(0, seq.count), seq.prompt.length)
  return all
}

export interface ChunkEnd {
  readonly finishReason?: FinishReason
  readonly matchedStop?: string
}

/** Sends the tokens not sent yet as one chunk (nothing when there are none and it is not the end). */
export const flush = <C>(seq: Sequence<C>, end: ChunkEnd = {}): void => {
  const from = seq.emitted
  const to = seq.count
  if (to === from && end.finishReason === undefined) return
  const k = seq.params.topLogprobs
  seq.emitted = to
  seq.sink.chunk(
    new GenerateChunk(
      {
        outputIds: seq.outIds.slice(from, to),
        logprobs: seq.outLogprobs.slice(from, to),
        versions: seq.outVersions.slice(from, to),
        ...(k > 0 ? { topIds: seq.outTopIds.slice(from * k, to * k), topLogprobs: seq.outTopLogprobs.slice(from * k, to * k) } : {}),
        ...end
      },
      true // built from values checked here; skip per-token schema validation
    )
  )
}

/** A last chunk with no tokens (a request cancelled or closed before or between tokens). */
export const emptyChunk = (finishReason: FinishReason): GenerateChunk =>
  new GenerateChunk({ outputIds: new Int32Array(0), logprobs: new Float32Array(0), versions: new Int32Array(0), finishReason }, true)
