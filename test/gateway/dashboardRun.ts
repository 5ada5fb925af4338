/**
 * A small recorded run for the dashboard's tests, through the real protocols against a real
 * Gateway on the tiny policy: one chat rollout made to split into two segments (its third call
 * edits the history), one Responses and one Messages rollout, and rollouts without calls in two
 * groups with states and rewards, for the table's filters and pages.
 */
import { DeviceBusy, DropCount, DropReason, PauseStats, RewardStats, SegmentStart, StalenessStats, TrainedCall, UsedStats, VersionMetrics } from "@reins/protocol"
import { Effect } from "effect"
import type { Running } from "./harness.js"
import type { TinyPolicy } from "./policy.js"

export interface SmallRun {
  /** The chat rollout with two segments (a `history-edited` break at its third call). */
  readonly split: string
  readonly responses: string
  readonly messages: string
  /** Every rollout made, newest first. */
  readonly all: ReadonlyArray<string>
}

const post = async (url: string, headers: Record<string, string>, body: unknown) => {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body), signal: AbortSignal.timeout(30_000) })
  const json = (await res.json()) as any
  if (res.status !== 200 && res.status !== 201) throw new Error(`POST ${url}: ${res.status} ${JSON.stringify(json)}`)
  return json
}

const finish = async (gw: Running, attemptId: string, reward: number | null, state = "succeeded") => {
  if (reward !== null) await gw.admin(`/api/attempts/${attemptId}/reward`, { body: { reward } })
  const r = await gw.admin(`/api/attempts/${attemptId}/state`, { body: { state } })
  if (r.status !== 200) throw new Error(`finishing ${attemptId}: ${r.status} ${JSON.stringify(r.json)}`)
}

/**
 * What an update into version 1 would record of the split rollout: its first call fully trained,
 * its second only in its first 2 response tokens (a response cut at the context limit), the
 * third not at all. The real Trainer's records are checked end to end in test/e2e.
 */
export const TRAINED = { version: 1, advantage: 0.75, weight: 0.0625, secondTokens: 2 } as const

const trainFirstCalls = async (gw: Running, rolloutId: string) => {
  const detail = await Effect.runPromise(gw.store.rollout(rolloutId))
  const [first, second] = detail.calls
  const row = (call: typeof first, tokens: number) =>
    new TrainedCall({ callId: call!.id, rolloutId, version: TRAINED.version, advantage: TRAINED.advantage, weight: TRAINED.weight, tokens })
  await Effect.runPromise(gw.store.recordTrained([row(first, first!.outputIds.length), row(second, TRAINED.secondTokens)]))
}

export const recordSmallRun = async (gw: Running, policy: TinyPolicy): Promise<SmallRun> => {
  const made: Array<string> = []
  const create = async (task: unknown, group: string) => {
    const r = await gw.admin("/api/rollouts", { body: { task, group } })
    if (r.status !== 201) throw new Error(`POST /api/rollouts: ${r.status}`)
    made.push(r.json.rollout_id)
    return { key: r.json.attempt_key as string, rolloutId: r.json.rollout_id as string, attemptId: r.json.attempt_id as string }
  }
  const model = policy.modelId

  const split = await create({ question: "2+2" }, "g-chat")
  const chat = (messages: Array<unknown>) =>
    post(`${gw.url}/v1/chat/completions`, { authorization: `Bearer ${split.key}` }, { model, messages, max_tokens: 6 })
  const base = [{ role: "system", content: "You are brief." }, { role: "user", content: "What is 2+2?" }]
  const first = await chat(base)
  const history = [...base, { role: "assistant", content: first.choices[0].message.content ?? "" }, { role: "user", content: "Are you sure?" }]
  await chat(history)
  // The harness edits an earlier user message: the prompt no longer extends the chain.
  await chat([base[0], { role: "user", content: "What is two plus two?" }, ...history.slice(2)])
  await finish(gw, split.attemptId, 1)
  await trainFirstCalls(gw, split.rolloutId)

  const responses = await create({ question: "weather" }, "g-chat")
  await post(`${gw.url}/v1/responses`, { authorization: `Bearer ${responses.key}` }, { model, input: [{ role: "user", content: "Weather in Paris?" }], max_output_tokens: 6 })
  await finish(gw, responses.attemptId, 0)

  const messages = await create({ question: "hello" }, "g-msg")
  await post(`${gw.url}/v1/messages`, { "x-api-key": messages.key, "anthropic-version": "2023-06-01" }, {
    model,
    max_tokens: 6,
    system: "Be kind.",
    messages: [{ role: "user", content: [{ type: "text", text: "Hello there" }] }]
  })
  await finish(gw, messages.attemptId, 0.5)

  // Rollouts without calls: rewards 0.1 .. 0.6, alternate groups, one failed and one still running.
  for (let i = 0; i < 6; i++) {
    const r = await create({ n: i }, i % 2 === 0 ? "g-even" : "g-odd")
    if (i === 5) continue
    await finish(gw, r.attemptId, (i + 1) / 10, i === 4 ? "failed" : "succeeded")
  }
  return { split: split.rolloutId, responses: responses.rolloutId, messages: messages.rolloutId, all: [...made].reverse() }
}

/** Serves fresh weights as the next version and tells the Gateway (the split schedule's swap): a `model.version` event. */
export const publishVersion = async (gw: Running, policy: TinyPolicy): Promise<number> => {
  const version = await policy.updateWeights()
  await Effect.runPromise(gw.gateway.swapped)
  return version
}

/**
 * A Trainer update's metrics as the Trainer publishes them (every field, zero drops), for tests
 * of what records and charts them.
 */
export const trainerMetrics = (version: number, tokens: number, wallSeconds: number): VersionMetrics =>
  new VersionMetrics({
    version,
    at: Date.now(),
    wallSeconds,
    reward: new RewardStats({ rollouts: 8, mean: 0.5, passRate: 0.5 }),
    used: new UsedStats({ groups: 2, rollouts: 8, segments: 9, tokens, actionTokens: Math.floor(tokens / 4) }),
    segmentStarts: Object.fromEntries(SegmentStart.literals.map((k) => [k, 0])) as VersionMetrics["segmentStarts"],
    drops: Object.fromEntries(DropReason.literals.map((k) => [k, new DropCount({ count: 0, actionTokens: 0 })])) as VersionMetrics["drops"],
    staleness: new StalenessStats({ histogram: [6, 2], max: 1, mean: 0.25, future: 0 }),
    pause: new PauseStats({ pauseSeconds: 1.5, drainSeconds: 0.2, heldCalls: 3 }),
    device: new DeviceBusy({ generating: 0.5, training: 0.3, idle: 0.2 }),
    train: { loss: 0.1 }
  })
