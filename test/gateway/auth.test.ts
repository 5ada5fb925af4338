/**
 * Attempt keys and the admin token: a key reaches only its own attempt, finished attempts get
 * 409, every admin route (walked from the Gateway's route table) refuses attempt keys and changes
 * nothing. Rewards: per call and final, last final wins.
 */
import { Gateway, httpRoutes } from "@reins/gateway"
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

/** The routes outside /api: the agent-facing API and the probes. Everything else needs the admin token. */
const AGENT_ROUTES = [
  "POST /v1/chat/completions",
  "POST /v1/completions",
  "POST /v1/responses",
  "GET /v1/responses/:id",
  "POST /v1/messages",
  "POST /v1/messages/count_tokens",
  "GET /v1/models",
  "GET /v1/models/*",
  "POST /v1/reward",
  "GET /healthz",
  "GET /metrics"
]

/**
 * The dashboard's routes: the login form, its static files and the app's shell, which holds no
 * data (it reads the admin API with the session cookie). dashboard-ui.test.ts checks that an
 * attempt key gets the login form there, not the app.
 */
const DASHBOARD_ROUTES = ["GET /ui", "POST /ui/login", "POST /ui/logout", "GET /ui/assets/*", "GET /ui/vendor/*"]

/** A body each admin POST route would accept from the admin: only the key may stop it. */
const VALID_BODIES: Record<string, unknown> = {
  "api.rollouts.create": { task: { q: "made by an attempt" } },
  "api.rollouts.retry": {},
  "api.attempts.state": { state: "succeeded", reason: "finished itself" },
  "api.attempts.reward": { reward: 1, info: { by: "itself" } },
  "api.gateway.pause": { mode: "drain" },
  "api.gateway.resume": {}
}

/** Any route; a reply that is not a refusal (an event stream, say) is not read to its end. */
const call = async (method: string, path: string, headers: Record<string, string>, body?: unknown) => {
  const res = await fetch(gw.url + path, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000)
  })
  if (res.status !== 401) {
    await res.body?.cancel()
    return { status: res.status, json: null }
  }
  return { status: res.status, json: (await res.json()) as any }
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
    // (nor reach it through the admin API: see "every admin route" below)
    expect((await gw.admin(`/api/rollouts/${b.rolloutId}`)).json.rewards).toEqual([])
    expect((await gw.admin(`/api/rollouts/${a.rolloutId}`)).json.rewards).toEqual([])
    expect((await get("/api/gateway/state", { authorization: `Bearer ${ADMIN}` })).status).toBe(200)
  })

  it("refuses an attempt key on every admin route of the route table, whatever the header, and changes nothing", async () => {
    // Every route outside /api is one an agent (or anyone) may call, named here: a new route must
    // be classified, and one under /api is tried below without anyone listing it.
    const outside = httpRoutes.filter((r) => !r.path.startsWith("/api/")).map((r) => `${r.method} ${r.path}`)
    expect(outside.sort()).toEqual([...AGENT_ROUTES, ...DASHBOARD_ROUTES].sort())
    const adminRoutes = httpRoutes.filter((r) => r.path.startsWith("/api/"))
    expect(adminRoutes.length).toBeGreaterThanOrEqual(10)

    const self = await gw.attempt({ who: "self" })
    const other = await gw.attempt({ who: "other" })
    expect((await post("/v1/chat/completions", chat, { authorization: `Bearer ${other.key}` })).status).toBe(200)
    const snapshot = async () => {
      const { paused_seconds: _grows, ...gate } = (await gw.admin("/api/gateway/state")).json
      return {
        self: (await gw.admin(`/api/rollouts/${self.rolloutId}`)).json,
        other: (await gw.admin(`/api/rollouts/${other.rolloutId}`)).json,
        list: (await gw.admin("/api/rollouts?limit=500")).json,
        gate
      }
    }
    // The attempt's own ids (an attempt finishing or rewarding itself) and another's.
    const ids = { rollout: [self.rolloutId, other.rolloutId], attempt: [self.attemptId, other.attemptId] }
    const paths = (path: string): Array<string> =>
      !path.includes(":id") ? [path] : (path.startsWith("/api/attempts/") ? ids.attempt : ids.rollout).map((id) => path.replace(":id", id))
    const headerForms: Array<Record<string, string>> = [{ authorization: `Bearer ${self.key}` }, { "x-api-key": self.key }, { "x-admin-token": self.key }]

    const tryAll = async () => {
      const before = await snapshot()
      let tried = 0
      for (const route of adminRoutes) {
        const body = route.method === "POST" ? VALID_BODIES[route.name] : undefined
        expect(route.method === "GET" || body !== undefined, `a valid body for ${route.name}`).toBe(true)
        for (const path of paths(route.path)) {
          for (const headers of headerForms) {
            const r = await call(route.method, path, headers, body)
            expect(r.status, `${route.method} ${path} with ${Object.keys(headers)[0]}`).toBe(401)
            expectOpenAIError(r.json, "invalid_admin_token")
            tried++
          }
        }
      }
      expect(await snapshot()).toEqual(before)
      return tried
    }
    const whileRunning = await tryAll()
    // Again while paused, so an attempt's resume would show too.
    expect((await gw.admin("/api/gateway/pause", { body: { mode: "drain" } })).json.paused).toBe(true)
    try {
      expect(await tryAll()).toBe(whileRunning)
    } finally {
      await gw.admin("/api/gateway/resume", { body: {} })
    }
    expect(whileRunning).toBe(adminRoutes.reduce((n, r) => n + paths(r.path).length * headerForms.length, 0))
    // The token itself still works on them.
    expect((await gw.admin(`/api/rollouts/${self.rolloutId}`)).json.attempts.map((x: any) => x.state)).toEqual(["running"])
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
