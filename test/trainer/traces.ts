/**
 * Hand-built traces for the trainer tests: real `LlmCall` / `Reward` Schema instances, written as
 * a harness's calls would be recorded by the Gateway (exact prompt ids reusing earlier calls).
 */
import { CallTimings, LlmCall, PromptReuse, Reward, type BreakReason } from "@reins/protocol"
import { finalReward, type RolloutTrace } from "@reins/trainer"

export interface CallSpec {
  readonly id: string
  readonly seq: number
  readonly prompt: ReadonlyArray<number>
  readonly output: ReadonlyArray<number>
  /** Default: -0.1, -0.2, ... per output token. */
  readonly logprobs?: ReadonlyArray<number>
  /** Default: version 1 for every token. */
  readonly versions?: ReadonlyArray<number>
  readonly status?: number
  readonly trainable?: boolean
  readonly fromCallId?: string | null
  readonly break?: BreakReason | null
  readonly rolloutId?: string
  readonly attemptId?: string
}

export const call = (spec: CallSpec): LlmCall =>
  new LlmCall({
    id: spec.id,
    rolloutId: spec.rolloutId ?? "r1",
    attemptId: spec.attemptId ?? "a1",
    seq: spec.seq,
    endpoint: "chat.completions",
    model: "policy",
    status: spec.status ?? 200,
    error: spec.status === undefined || spec.status === 200 ? null : "failed",
    request: null,
    response: null,
    promptIds: Int32Array.from(spec.prompt),
    outputIds: Int32Array.from(spec.output),
    logprobs: Float32Array.from(spec.logprobs ?? spec.output.map((_, i) => -0.1 * (i + 1))),
    versions: Int32Array.from(spec.versions ?? spec.output.map(() => 1)),
    finishReason: "stop",
    trainable: spec.trainable ?? true,
    reuse: new PromptReuse({
      reusedTokens: 0,
      fromCallId: spec.fromCallId ?? null,
      break: spec.break ?? null
    }),
    timings: new CallTimings({ receivedAt: 0, startedAt: 0, firstTokenAt: 0, finishedAt: 0, heldMs: 0 })
  })

let rewardSeq = 0
export const reward = (value: number, fields: { readonly callId?: string; readonly rolloutId?: string; readonly at?: number } = {}): Reward =>
  new Reward({
    id: `rw-${++rewardSeq}`,
    rolloutId: fields.rolloutId ?? "r1",
    attemptId: "a1",
    callId: fields.callId ?? null,
    value,
    info: null,
    createdAt: fields.at ?? rewardSeq
  })

export const trace = (
  rolloutId: string,
  groupId: string,
  calls: ReadonlyArray<LlmCall>,
  rewards: ReadonlyArray<Reward> = []
): RolloutTrace => ({ rolloutId, groupId, attemptId: "a1", calls, rewards, reward: finalReward(rewards), superseded: { calls: 0, actionTokens: 0 } })

/**
 * A clean multi-turn chain: each prompt is the previous prompt + output + new observation tokens,
 * as the Gateway's exact-token reuse produces it. Outputs are `outputs[i]`, observations between
 * turns are `[900 + i, 950 + i]`.
 */
export const chain = (
  rolloutId: string,
  outputs: ReadonlyArray<ReadonlyArray<number>>,
  fields: { readonly versions?: ReadonlyArray<ReadonlyArray<number>>; readonly system?: ReadonlyArray<number> } = {}
): Array<LlmCall> => {
  const calls: Array<LlmCall> = []
  let prompt: Array<number> = [...(fields.system ?? [1, 2, 3])]
  outputs.forEach((output, i) => {
    const previous = calls[i - 1]
    const c = call({
      id: `${rolloutId}-c${i + 1}`,
      seq: i + 1,
      rolloutId,
      prompt,
      output,
      ...(fields.versions?.[i] !== undefined ? { versions: fields.versions[i] } : {}),
      fromCallId: previous?.id ?? null
    })
    calls.push(c)
    prompt = [...prompt, ...output, 900 + i, 950 + i]
  })
  return calls
}

/** Each call starts over with an edited history (the Gateway classified it `history-edited`). */
export const edited = (rolloutId: string, outputs: ReadonlyArray<ReadonlyArray<number>>): Array<LlmCall> =>
  outputs.map((output, i) =>
    call({
      id: `${rolloutId}-c${i + 1}`,
      seq: i + 1,
      rolloutId,
      prompt: [1, 2, 100 + i],
      output,
      break: i === 0 ? null : "history-edited"
    })
  )

export const sum = (a: ArrayLike<number>) => {
  let s = 0
  for (let i = 0; i < a.length; i++) s += a[i]!
  return s
}
