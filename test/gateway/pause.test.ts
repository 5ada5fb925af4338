/**
 * The pause gate: 16 concurrent harness calls across pause → weight update → resume see no
 * error and no 429; every token sampled after the resume carries the new version and was
 * sampled by the new weights (its recorded logprob is theirs, not the old ones'); streams stay
 * open through the pause; calls held too long get 503 + Retry-After. Also reachable as actor
 * messages (GatewayRpcs).
 */
import { Gateway } from "@reins/gateway"
import type { EngineStats } from "@reins/policy"
import { ActorSystem } from "@reins/runtime"
import Anthropic from "@anthropic-ai/sdk"
import { Effect, Layer } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Running, startGateway } from "./harness.js"
import { tinyPolicy, type TinyPolicy } from "./policy.js"

/**
 * Completion lengths (no stop ids: every call runs to its max_tokens). The first eight are long
 * enough to be mid-generation when the pause comes; the held ones can be shorter.
 */
const tokensOf = (i: number) => (i < 8 ? 400 : 100)
let policy: TinyPolicy
let gw: Running
beforeAll(async () => {
  policy = await tinyPolicy({ contextLength: 1024, stopIds: [] })
  gw = await startGateway(policy.backend)
})
afterAll(async () => {
  await gw?.close()
  await policy?.close()
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** The engine's logprobs (KV cache, batched) against a full forward pass of the same weights (measured: ~1e-6). */
const SAME_WEIGHTS_TOLERANCE = 1e-4

/**
 * Each token's recorded logprob (temperature 1) is the one the weights of the version that
 * sampled it give it, and, over all tokens, clearly not what the other version's weights give
 * (two initialisations differ by ~0.18 nats a token here): the update changed what the policy
 * computes, not only its label.
 */
const expectSampledBy = async (calls: ReadonlyArray<any>, old: number, next: number) => {
  const other = (v: number) => (v === old ? next : old)
  const tokens = { [old]: 0, [next]: 0 }
  let worstSame = 0
  const otherDiffs: Array<number> = []
  for (const c of calls) {
    const sequence = Int32Array.from([...c.prompt_token_ids, ...c.output_token_ids])
    const scored = { [old]: (await policy.score(old, [sequence]))[0]!, [next]: (await policy.score(next, [sequence]))[0]! }
    c.output_logprobs.forEach((lp: number, i: number) => {
      const v: number = c.versions[i]
      const at = c.prompt_token_ids.length + i
      tokens[v]! += 1
      worstSame = Math.max(worstSame, Math.abs(lp - scored[v]![at]!))
      otherDiffs.push(Math.abs(lp - scored[other(v)]![at]!))
    })
  }
  expect(tokens[old], `tokens sampled by version ${old}`).toBeGreaterThan(0)
  expect(tokens[next], `tokens sampled by version ${next}`).toBeGreaterThan(0)
  expect(worstSame, "largest |recorded − scored| under the sampling version's weights").toBeLessThan(SAME_WEIGHTS_TOLERANCE)
  expect(otherDiffs.reduce((a, b) => a + b, 0) / otherDiffs.length, "mean |recorded − scored| under the other version's weights").toBeGreaterThan(0.05)
}

/** Polls the engine's stats until `ok` (bounded). */
const engineUntil = async (ok: (stats: EngineStats) => boolean, what: string) => {
  for (let i = 0; i < 2_000; i++) {
    if (ok(await Effect.runPromise(policy.engine.stats))) return
    await sleep(2)
  }
  throw new Error(`timed out waiting for ${what}`)
}

interface Outcome {
  readonly ok: boolean
  readonly status?: number
  readonly callId?: string
}

describe("pause gate", () => {
  for (const mode of ["interrupt", "drain"] as const) {
    it(`holds calls across pause (${mode}) → update → resume without errors`, async () => {
      try {
        await run(mode)
      } finally {
        await gw.admin("/api/gateway/resume", { body: {} })
      }
    })
  }

  const run = async (mode: "interrupt" | "drain") => {
    {
      const a = await gw.attempt()
      const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
      const before = (await gw.gateway.state.pipe(Effect.runPromise)).version
      const request = (i: number) => ({ model: policy.modelId, messages: [{ role: "user" as const, content: `call ${i}` }], max_tokens: tokensOf(i) })
      const call = async (i: number): Promise<Outcome> => {
        try {
          if (i % 2 === 0) {
            let tokens = 0
            let finish: string | null = null
            for await (const c of await openai.chat.completions.create({ ...request(i), stream: true })) {
              tokens += (c.choices[0] as unknown as { token_ids?: Array<number> } | undefined)?.token_ids?.length ?? 0
              finish = c.choices[0]?.finish_reason ?? finish
            }
            return { ok: tokens === tokensOf(i) && finish === "length" }
          }
          const r = await openai.chat.completions.create(request(i))
          return { ok: r.usage!.completion_tokens === tokensOf(i) && r.choices[0]!.finish_reason === "length" }
        } catch (e) {
          return { ok: false, status: (e as { status?: number }).status }
        }
      }
      const first = Array.from({ length: 8 }, (_, i) => call(i))
      const waitFor = async (ok: (state: any) => boolean) => {
        let state = await gw.admin("/api/gateway/state")
        for (let i = 0; i < 200 && !ok(state.json); i++) {
          await sleep(25)
          state = await gw.admin("/api/gateway/state")
        }
        return state.json
      }
      expect((await waitFor((s) => s.in_flight === 8)).in_flight).toBe(8) // the first eight are generating
      const pauseSentAt = Date.now()
      const paused = await gw.admin("/api/gateway/pause", { body: { mode } })
      expect(paused.status).toBe(200)
      expect(paused.json).toMatchObject({ paused: true, mode })
      const second = Array.from({ length: 8 }, (_, i) => call(8 + i)) // held at the gate
      const held = await waitFor((s) => s.held === 8)
      expect(held).toMatchObject({ paused: true, held: 8 })
      // Drained: nothing generating. Interrupted: the first calls are stalled mid-generation.
      if (mode === "drain") expect(held.in_flight).toBe(0)
      else expect(held.in_flight).toBeGreaterThan(0)
      // The weight update: other weights, not only another version number.
      expect(await policy.updateWeights()).toBe(before + 1)
      const resumed = await gw.admin("/api/gateway/resume", { body: {} })
      expect(resumed.json).toMatchObject({ paused: false, version: before + 1 })
      expect(resumed.status).toBe(200)
      const outcomes = await Promise.all([...first, ...second])
      expect(outcomes.filter((o) => !o.ok)).toEqual([])

      const calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls as Array<any>
      expect(calls).toHaveLength(16)
      for (const c of calls) {
        expect(c.status).toBe(200)
        const i = Number(/call (\d+)/.exec(c.request.messages[0].content)![1])
        expect(c.versions).toHaveLength(tokensOf(i))
        // Versions never go back, and every token sampled after the resume is the new version.
        for (let i = 1; i < c.versions.length; i++) expect(c.versions[i]).toBeGreaterThanOrEqual(c.versions[i - 1])
        // Calls sent during the pause waited at the gate: every token they got is from the new weights.
        const second = i >= 8
        if (second) expect(c.timings.held_ms).toBeGreaterThan(0)
        if (second || c.timings.held_ms > 0) expect(new Set(c.versions)).toEqual(new Set([before + 1]))
        // Drained calls finished before the update.
        else if (mode === "drain" && c.timings.started_at < pauseSentAt) expect(new Set(c.versions)).toEqual(new Set([before]))
      }
      if (mode === "interrupt") {
        // Interrupted generations were continued with the new weights.
        expect(calls.some((c) => c.versions[0] === before && c.versions[c.versions.length - 1] === before + 1)).toBe(true)
      }
      await expectSampledBy(calls, before, before + 1)
      const state = (await gw.admin(`/api/gateway/state`)).json
      expect(state).toMatchObject({ paused: false, held: 0, in_flight: 0 })
    }
  }

  it("holds calls of the three protocols alike: chat, Responses and Messages, streamed or not, all succeed after the resume", async () => {
    const a = await gw.attempt()
    const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: a.key, maxRetries: 0 })
    const before = (await gw.gateway.state.pipe(Effect.runPromise)).version
    const model = policy.modelId
    const n = (i: number) => (i < 4 ? 300 : 60)
    /** Each call's output token count as its protocol reports it (any error fails the test). */
    const call = async (i: number): Promise<number> => {
      const content = `mixed ${i}`
      const stream = i % 2 === 1
      switch (i % 3) {
        case 0: {
          if (!stream) return (await openai.chat.completions.create({ model, messages: [{ role: "user", content }], max_tokens: n(i) })).usage!.completion_tokens
          let tokens = 0
          for await (const c of await openai.chat.completions.create({ model, messages: [{ role: "user", content }], max_tokens: n(i), stream: true })) {
            tokens += (c.choices[0] as unknown as { token_ids?: Array<number> } | undefined)?.token_ids?.length ?? 0
          }
          return tokens
        }
        case 1: {
          if (!stream) return (await openai.responses.create({ model, input: content, max_output_tokens: n(i) })).usage!.output_tokens
          let tokens = -1
          for await (const e of await openai.responses.create({ model, input: content, max_output_tokens: n(i), stream: true })) {
            if (e.type === "response.incomplete") tokens = e.response.usage!.output_tokens
          }
          return tokens
        }
        default: {
          const params = { model, max_tokens: n(i), messages: [{ role: "user" as const, content }] }
          if (!stream) return (await anthropic.messages.create(params)).usage.output_tokens
          return (await anthropic.messages.stream(params).finalMessage()).usage.output_tokens
        }
      }
    }
    const state = async () => (await gw.admin("/api/gateway/state")).json
    const waitFor = async (ok: (s: any) => boolean) => {
      for (let i = 0; i < 400; i++) {
        const s = await state()
        if (ok(s)) return s
        await sleep(25)
      }
      throw new Error(`gateway state never matched: ${JSON.stringify(await state())}`)
    }
    try {
      const first = Array.from({ length: 4 }, (_, i) => call(i))
      await waitFor((s) => s.in_flight === 4)
      expect((await gw.admin("/api/gateway/pause", { body: { mode: "interrupt" } })).status).toBe(200)
      const second = Array.from({ length: 12 }, (_, i) => call(4 + i))
      expect(await waitFor((s) => s.held === 12)).toMatchObject({ paused: true, held: 12 })
      expect(await policy.updateWeights()).toBe(before + 1)
      expect((await gw.admin("/api/gateway/resume", { body: {} })).json).toMatchObject({ paused: false, version: before + 1 })
      const tokens = await Promise.all([...first, ...second])
      expect(tokens).toEqual(Array.from({ length: 16 }, (_, i) => n(i)))
    } finally {
      await gw.admin("/api/gateway/resume", { body: {} })
    }
    const calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls as Array<any>
    expect(calls).toHaveLength(16)
    const byIndex = new Map(calls.map((c) => [Number(/mixed (\d+)/.exec(JSON.stringify(c.request))![1]), c] as const))
    for (const [i, c] of byIndex) {
      expect([c.status, c.trainable, c.endpoint, c.protocol]).toEqual([200, true, ["chat.completions", "responses", "messages"][i % 3], i % 3 === 2 ? "anthropic" : "openai"])
      expect(c.versions).toHaveLength(n(i))
      // Held at the gate: every token from the new weights.
      if (i >= 4) {
        expect(c.timings.held_ms).toBeGreaterThan(0)
        expect(new Set(c.versions)).toEqual(new Set([before + 1]))
      }
    }
    await expectSampledBy(calls, before, before + 1)
    expect(await state()).toMatchObject({ paused: false, held: 0, in_flight: 0 })
  })

  it("records a call whose harness goes away mid-generation as cancelled, once, and frees its slot", async () => {
    const a = await gw.attempt()
    for (const stream of [true, false]) {
      const sampled = (await Effect.runPromise(policy.engine.stats)).generatedTokens
      const controller = new AbortController()
      const res = fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        signal: controller.signal,
        headers: { authorization: `Bearer ${a.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: policy.modelId, messages: [{ role: "user", content: `leave ${stream}` }], max_tokens: 900, stream })
      })
      if (stream) {
        const reader = (await res).body!.getReader()
        await reader.read() // the first chunk arrived: generation is under way
      } else {
        // Under way: the engine is sampling this call (900 tokens to go), no reply yet.
        await engineUntil((s) => s.running === 1 && s.generatedTokens > sampled, "the call to start generating")
      }
      controller.abort()
      await (stream ? Promise.resolve() : res.catch(() => undefined))
    }
    let calls: Array<any> = []
    for (let i = 0; i < 100 && calls.length < 2; i++) {
      await sleep(30)
      calls = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls
    }
    expect(calls.map((c) => [c.status, c.finish_reason, c.trainable])).toEqual([
      [499, "cancelled", false],
      [499, "cancelled", false]
    ])
    for (const c of calls) {
      expect(c.output_token_ids.length).toBeLessThan(900)
      expect(c.versions).toHaveLength(c.output_token_ids.length)
    }
    expect((await gw.admin("/api/gateway/state")).json.in_flight).toBe(0)
  })

  it("answers 503 with Retry-After to a call held longer than the maximum", async () => {
    const short = await startGateway(policy.backend, { maxHold: "300 millis" })
    try {
      const a = await short.attempt()
      await short.admin("/api/gateway/pause", { body: { mode: "drain" } })
      const res = await fetch(`${short.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${a.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: policy.modelId, messages: [{ role: "user", content: "hi" }], max_tokens: 4 })
      })
      expect(res.status).toBe(503)
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0)
      expect(((await res.json()) as any).error.code).toBe("gateway_paused")
      await short.admin("/api/gateway/resume", { body: {} })
      const calls = (await short.admin(`/api/rollouts/${a.rolloutId}`)).json.calls
      expect(calls.map((c: any) => c.status)).toEqual([503])
    } finally {
      await short.close()
    }
  })

  it("is reachable as actor messages (Pause / Resume / State)", async () => {
    const program = Effect.gen(function* () {
      yield* Layer.build(Gateway.actorLayer.pipe(Layer.provide(Layer.succeed(Gateway.Gateway, gw.gateway))))
      const client = yield* Gateway.GatewayActor.client
      const paused = yield* client.Pause({ mode: "drain" })
      const state = yield* client.State()
      const resumed = yield* client.Resume()
      return { paused: paused.paused, state: state.paused, resumed: resumed.paused }
    })
    const result = await Effect.runPromise(
      program.pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal()))
    )
    expect(result).toEqual({ paused: true, state: true, resumed: false })
  })
})
