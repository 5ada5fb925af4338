/**
 * What a model call needs (resolved once when the Gateway starts) and the recording helpers
 * every call path shares: a call is recorded before its response is sent, error calls too.
 */
import type { Attempt, CallEndpoint, CallProtocol, LlmCall } from "@reins/protocol"
import { Effect } from "effect"
import type { PauseGateService } from "../gate/PauseGate.js"
import type { GeneratorService } from "../generator/Generator.js"
import type { UpstreamService } from "../generator/Upstream.js"
import { type ApiError, internal } from "../http/errors.js"
import type { MetricsService } from "../metrics.js"
import type { TextCodec } from "../openai/codec.js"
import type { Conversations } from "../prompt/Conversations.js"
import type { PromptFormat, Reuse } from "../prompt/reuse.js"
import type { NewCall, StoreService } from "../store/Store.js"

/** Where tokens come from: the policy engine (exact tokens) or an external server (proxied). */
export type Backend =
  | { readonly _tag: "Engine"; readonly generator: GeneratorService; readonly format: PromptFormat; readonly codec: TextCodec }
  | { readonly _tag: "Upstream"; readonly upstream: UpstreamService }

export interface CallEnv {
  readonly backend: Backend
  readonly store: StoreService
  readonly gate: PauseGateService
  readonly metrics: MetricsService
  readonly conversations: Conversations
}

/** One model call being served. */
export interface CallContext {
  readonly attempt: Attempt
  readonly endpoint: CallEndpoint
  readonly protocol: CallProtocol
  readonly receivedAt: number
  /**
   * The request body as received, once read: recorded as it crossed the wire rather than
   * re-serialized (which a deeply nested body would not survive: its call would go unrecorded).
   */
  readonly requestJson?: string | undefined
}

export const EMPTY_INT = new Int32Array(0)
export const EMPTY_FLOAT = new Float32Array(0)
export const NO_REUSE: Reuse = { reusedTokens: 0, fromCallId: null, break: null }

/** Records a call that ended in an error; the error is what the harness gets either way. */
export const recordError = (
  env: CallEnv,
  ctx: CallContext,
  error: ApiError,
  request: unknown,
  extra: Partial<Pick<NewCall, "promptIds" | "outputIds" | "logprobs" | "versions" | "reuse" | "model">> & { readonly heldMs?: number; readonly startedAt?: number | null } = {}
): Effect.Effect<void> =>
  env.store
    .recordCall({
      attemptId: ctx.attempt.id,
      endpoint: ctx.endpoint,
      protocol: ctx.protocol,
      model: extra.model ?? modelOf(request),
      status: error.status,
      error: `${error.code ?? error.type}: ${error.message}`,
      request,
      requestJson: ctx.requestJson,
      response: null,
      promptIds: extra.promptIds ?? EMPTY_INT,
      outputIds: extra.outputIds ?? EMPTY_INT,
      logprobs: extra.logprobs ?? EMPTY_FLOAT,
      versions: extra.versions ?? EMPTY_INT,
      finishReason: null,
      trainable: false,
      reuse: extra.reuse ?? NO_REUSE,
      timings: { receivedAt: ctx.receivedAt, startedAt: extra.startedAt ?? null, firstTokenAt: null, finishedAt: Date.now(), heldMs: extra.heldMs ?? 0 }
    })
    .pipe(
      Effect.catchAll((e) => Effect.logError(`could not record a failed call of attempt ${ctx.attempt.id}: ${e.message}`)),
      Effect.asVoid
    )

/** Records a served call; if the store fails the harness gets a 500, never an unrecorded answer. */
export const recordServed = (env: CallEnv, call: NewCall): Effect.Effect<LlmCall, ApiError> =>
  env.store.recordCall(call).pipe(
    Effect.tapError((e) => Effect.logError(`could not record a call of attempt ${call.attemptId}: ${e.message}`)),
    Effect.mapError((e) => internal(`The call could not be recorded (${e.message}); it is not answered.`))
  )

export const modelOf = (request: unknown): string => {
  const m = (request as { model?: unknown } | null)?.model
  return typeof m === "string" ? m.slice(0, 200) : ""
}

/** Collects the chunks of one generation. */
export class Sampled {
  private ids: Array<Int32Array> = []
  private lps: Array<Float32Array> = []
  private vers: Array<Int32Array> = []
  private tIds: Array<Int32Array> = []
  private tLps: Array<Float32Array> = []
  count = 0
  firstTokenAt: number | null = null
  finishReason: string | null = null

  push(c: {
    readonly outputIds: Int32Array
    readonly logprobs: Float32Array
    readonly versions: Int32Array
    readonly topIds?: Int32Array | undefined
    readonly topLogprobs?: Float32Array | undefined
    readonly finishReason?: string | undefined
  }) {
    if (c.outputIds.length > 0) {
      this.firstTokenAt ??= Date.now()
      this.ids.push(c.outputIds)
      this.lps.push(c.logprobs)
      this.vers.push(c.versions)
      if (c.topIds && c.topLogprobs) {
        this.tIds.push(c.topIds)
        this.tLps.push(c.topLogprobs)
      }
      this.count += c.outputIds.length
    }
    if (c.finishReason !== undefined) this.finishReason = c.finishReason
  }

  get outputIds() {
    return concat(Int32Array, this.ids)
  }
  get logprobs() {
    return concat(Float32Array, this.lps)
  }
  get versions() {
    return concat(Int32Array, this.vers)
  }
  get topIds() {
    return this.tIds.length ? concat(Int32Array, this.tIds) : undefined
  }
  get topLogprobs() {
    return this.tLps.length ? concat(Float32Array, this.tLps) : undefined
  }
}

export const concat = <T extends Int32Array | Float32Array>(ctor: { new (n: number): T }, parts: ReadonlyArray<T>): T => {
  if (parts.length === 1) return parts[0]!
  let n = 0
  for (const p of parts) n += p.length
  const out = new ctor(n)
  n = 0
  for (const p of parts) {
    out.set(p as never, n)
    n += p.length
  }
  return out
}
