/**
 * Attempt keys and the admin token: a key reaches only its own attempt, finished attempts get
 * 409, the admin API refuses attempt keys. Rewards: per call and final, last final wins.
 */
import { Gateway } from "@reins/gateway"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeUpstream } from "./fakeUpstream.js"
import { ADMIN, type Running, startGateway } from "./harness.js"

let upstream: FakeUpstream
let gw: Running

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gw = await startGateway(Gateway.upstreamBackend({ url: upstream.url }))
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
  const res = await fetch(gw.url + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) })
  return { status: res.status, json: (await res.json()) as any }
}
const get = async (path: string, headers: Record<string, string> = {}) => {
  const res = await fetch(gw.url + path, { headers })
  return { status: res.status, json: (await res.json()) as any }
}
const chat = { model: "fake-model", messages: [{ role: "user", content: "hi" }] }
const expectOpenAIError = (json: any, code: string | null) => {
  expect(Object.keys(json)).toEqual(["error"])
  expect(Object.keys(json.error).sort()).toEqual(["code", "message", "param", "type"])
  expect(typeof json.error.message).toBe("string")
  if (code !== undefined) expect(json.error.code).toBe(code)
}

describe("attempt keys", () => {
  it("rejects missing and unknown keys with 401 and accepts Bearer or x-api-key", async () => {
    const none = await post("/v1/chat/completions", chat)
    expect(none.status).toBe(401)
    expectOpenAIError(none.json, "invalid_api_key")
    const wrong = await post("/v1/chat/completions", chat, { authorization: "Bearer rk-not-a-key" })
    expect(wrong.status).toBe(401)
    expectOpenAIError(wrong.json, "invalid_api_key")
    const a = await gw.attempt()
    expect((await post("/v1/chat/completions", chat, { authorization: `Bearer ${a.key}` })).status).toBe(200)
    expect((await post("/v1/chat/completions", chat, { "x-api-key": a.key })).status).toBe(200)
    const detail = await gw.admin(`/api/rollouts/${a.rolloutId}`)
    expect(detail.json.calls).toHaveLength(2)
  })

  it("answers 409 once the attempt has ended, for calls and rewards, and records nothing", async () => {
    const a = await gw.attempt()
    const done = await gw.admin(`/api/attempts/${a.attemptId}/state`, { body: { state: "succeeded", reason: "exit 0" } })
    expect(done.status).toBe(200)
    expect(done.json.state).toBe("succeeded")
    const openai = new OpenAI({ baseURL: a.baseUrl, apiKey: a.key, maxRetries: 0 })
    const err = await openai.chat.completions.create(chat as any).catch((e) => e)
    expect(err).toBeInstanceOf(OpenAI.ConflictError)
    expect(err.code).toBe("attempt_not_running")
    const reward = await post("/v1/reward", { reward: 1 }, { authorization: `Bearer ${a.key}` })
    expect(reward.status).toBe(409)
    expectOpenAIError(reward.json, "attempt_not_running")
    const detail = await gw.admin(`/api/rollouts/${a.rolloutId}`)
    expect(detail.json.calls).toEqual([])
    expect(detail.json.rewards).toEqual([])
    // Illegal transitions are refused.
    const again = await gw.admin(`/api/attempts/${a.attemptId}/state`, { body: { state: "running" } })
    expect(again.status).toBe(409)
  })

  it("starts a queued attempt on its first call", async () => {
    const r = await gw.admin("/api/rollouts", { body: { task: 1, start: false } })
    expect(r.status).toBe(201)
    expect((await gw.admin(`/api/rollouts/${r.json.rollout_id}`)).json.attempts[0].state).toBe("queued")
    expect((await post("/v1/chat/completions", chat, { authorization: `Bearer ${r.json.attempt_key}` })).status).toBe(200)
    expect((await gw.admin(`/api/rollouts/${r.json.rollout_id}`)).json.attempts[0].state).toBe("running")
  })

  it("keeps one attempt out of another's data", async () => {
    const a = await gw.attempt({ who: "a" })
    const b = await gw.attempt({ who: "b" })
    const called = await post("/v1/chat/completions", chat, { authorization: `Bearer ${b.key}` })
    expect(called.status).toBe(200)
    const bCall = (await gw.admin(`/api/rollouts/${b.rolloutId}`)).json.calls[0].id
    // A cannot reward B's call...
    const steal = await post("/v1/reward", { reward: 1, call_id: bCall }, { authorization: `Bearer ${a.key}` })
    expect(steal.status).toBe(404)
    expectOpenAIError(steal.json, "call_not_found")
    // ...nor read anything through the admin API.
    for (const path of [`/api/rollouts/${b.rolloutId}`, "/api/rollouts", "/api/gateway/state", "/api/events"]) {
      const r = await get(path, { authorization: `Bearer ${a.key}` })
      expect(r.status).toBe(401)
      expectOpenAIError(r.json, "invalid_admin_token")
    }
    const pause = await post("/api/gateway/pause", {}, { authorization: `Bearer ${a.key}` })
    expect(pause.status).toBe(401)
    expect((await gw.admin(`/api/rollouts/${b.rolloutId}`)).json.rewards).toEqual([])
    expect((await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.rewards).toEqual([])
    expect((await get("/api/gateway/state", { authorization: `Bearer ${ADMIN}` })).status).toBe(200)
  })

  it("keeps every reward; the last final reward is the rollout's", async () => {
    const a = await gw.attempt()
    const auth = { authorization: `Bearer ${a.key}` }
    await post("/v1/chat/completions", chat, auth)
    const callId = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.calls[0].id
    const turn = await post("/v1/reward", { reward: 0.5, call_id: callId }, auth)
    expect(turn.status).toBe(200)
    expect(turn.json).toMatchObject({ object: "reward", reward: 0.5, call_id: callId, attempt_id: a.attemptId })
    expect((await post("/v1/reward", { reward: 0 }, auth)).status).toBe(200)
    expect((await post("/v1/reward", { reward: 1, info: { passed: 3 } }, auth)).status).toBe(200)
    for (const [body, param] of [
      [{ reward: "1" }, "reward"],
      [{}, "reward"],
      [{ reward: 1, extra: true }, "extra"],
      [{ reward: 1, info: [1] }, "info"]
    ] as const) {
      const bad = await post("/v1/reward", body, auth)
      expect(bad.status).toBe(400)
      expect(bad.json.error.param).toBe(param)
    }
    const detail = await gw.admin(`/api/rollouts/${a.rolloutId}`)
    expect(detail.json.reward).toBe(1)
    expect(detail.json.rewards.map((r: any) => [r.reward, r.call_id])).toEqual([
      [0.5, callId],
      [0, null],
      [1, null]
    ])
    expect(detail.json.rewards[2].info).toEqual({ passed: 3 })
  })
})
