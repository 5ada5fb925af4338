/**
 * The admin API: rollouts (create, retry, list with filters and paging, detail), attempt
 * states and verifier rewards, the event stream (SSE, resumable), health and metrics.
 */
import { Gateway } from "@reins/gateway"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeUpstream } from "./fakeUpstream.js"
import { ADMIN, type Running, startGateway } from "./harness.js"

let upstream: FakeUpstream
let gw: Running

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gw = await startGateway(Gateway.upstreamBackend({ url: upstream.url }), { publicUrl: "http://agents.example:9000/v1" })
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

const chat = (key: string, content = "hi") =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content }] })
  }).then((r) => r.status)

/** Reads SSE events from the event stream until `until` says stop (bounded by a timeout). */
const readEvents = async (query: string, headers: Record<string, string>, until: (events: Array<any>) => boolean) => {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), 10_000)
  const res = await fetch(`${gw.url}/api/events${query}`, { headers: { authorization: `Bearer ${ADMIN}`, ...headers }, signal: controller.signal })
  expect(res.headers.get("content-type")).toContain("text/event-stream")
  const events: Array<any> = []
  const decoder = new TextDecoder()
  let buffer = ""
  try {
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(bytes, { stream: true })
      let at: number
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, at)
        buffer = buffer.slice(at + 2)
        const data = block.split("\n").find((l) => l.startsWith("data: "))
        const id = block.split("\n").find((l) => l.startsWith("id: "))
        if (data) events.push({ id: Number(id?.slice(4)), ...JSON.parse(data.slice(6)) })
      }
      if (until(events)) break
    }
  } finally {
    clearTimeout(timer)
    controller.abort()
  }
  return events
}

describe("admin API", () => {
  it("creates rollouts and hands out the agent-facing base URL", async () => {
    const r = await gw.admin("/api/rollouts", { body: { task: { q: 1 }, group: "g1" } })
    expect(r.status).toBe(201)
    expect(r.json).toMatchObject({ base_url: "http://agents.example:9000/v1" })
    expect(r.json.attempt_key).toMatch(/^rk-/)
    expect((await gw.admin("/api/rollouts", { body: { task: 1, colour: "red" } })).json.error).toMatchObject({ code: "unknown_parameter", param: "colour" })
    expect((await gw.admin("/api/rollouts", { body: { group: 5 } })).json.error).toMatchObject({ param: "group" })
    expect((await gw.admin("/api/rollouts/ro_missing")).status).toBe(404)
  })

  it("retries a rollout as a new attempt with a new key once the previous one ended", async () => {
    const a = await gw.attempt()
    expect((await gw.admin(`/api/rollouts/${a.rolloutId}/attempts`, { body: {} })).status).toBe(409)
    await gw.admin(`/api/attempts/${a.attemptId}/state`, { body: { state: "failed", reason: "node lost" } })
    const retry = await gw.admin(`/api/rollouts/${a.rolloutId}/attempts`, { body: {} })
    expect(retry.status).toBe(201)
    expect(retry.json.attempt_key).not.toBe(a.key)
    expect(await chat(a.key)).toBe(409)
    expect(await chat(retry.json.attempt_key)).toBe(200)
    // A verifier's reward lands after the harness exited.
    await gw.admin(`/api/attempts/${retry.json.attempt_id}/state`, { body: { state: "succeeded" } })
    expect((await gw.admin(`/api/attempts/${retry.json.attempt_id}/reward`, { body: { reward: 0.75, info: { verifier: "exit 0" } } })).status).toBe(201)
    const d = (await gw.admin(`/api/rollouts/${a.rolloutId}`)).json
    expect(d.state).toBe("succeeded")
    expect(d.reward).toBe(0.75)
    expect(d.attempts.map((x: any) => [x.index, x.state, x.reason])).toEqual([
      [0, "failed", "node lost"],
      [1, "succeeded", null]
    ])
    expect(d.calls).toHaveLength(1)
    expect(d.calls[0].attempt_id).toBe(retry.json.attempt_id)
  })

  it("lists rollouts by state and group, newest first, in pages", async () => {
    const ids: Array<string> = []
    for (let i = 0; i < 5; i++) ids.push((await gw.admin("/api/rollouts", { body: { task: i, group: "paged", start: i % 2 === 0 } })).json.rollout_id)
    const page1 = await gw.admin("/api/rollouts?group=paged&limit=2")
    expect(page1.json.data.map((r: any) => r.id)).toEqual([ids[4], ids[3]])
    const page2 = await gw.admin(`/api/rollouts?group=paged&limit=2&cursor=${page1.json.next_cursor}`)
    expect(page2.json.data.map((r: any) => r.id)).toEqual([ids[2], ids[1]])
    const page3 = await gw.admin(`/api/rollouts?group=paged&limit=2&cursor=${page2.json.next_cursor}`)
    expect(page3.json).toMatchObject({ next_cursor: null })
    expect(page3.json.data.map((r: any) => r.id)).toEqual([ids[0]])
    const queued = await gw.admin("/api/rollouts?group=paged&state=queued")
    expect(queued.json.data.map((r: any) => r.task)).toEqual([3, 1])
    expect((await gw.admin("/api/rollouts?state=sleeping")).status).toBe(400)
    expect((await gw.admin("/api/rollouts?limit=0")).json.error.param).toBe("limit")
  })

  it("streams events as SSE, from any point of the log", async () => {
    const a = await gw.attempt({ events: true })
    expect(await chat(a.key, "for the event stream")).toBe(200)
    await gw.admin(`/api/attempts/${a.attemptId}/state`, { body: { state: "succeeded" } })
    const mine = (events: Array<any>) => events.filter((e) => e.rollout_id === a.rolloutId)
    const events = await readEvents("", {}, (es) => mine(es).some((e) => e.type === "attempt.state"))
    expect(mine(events).map((e) => e.type)).toEqual(["rollout.created", "attempt.created", "call.recorded", "attempt.state"])
    const ids = events.map((e) => e.seq)
    expect(ids).toEqual([...ids].sort((x, y) => x - y))
    expect(events.every((e) => e.id === e.seq)).toBe(true)
    const recorded = mine(events).find((e) => e.type === "call.recorded")
    expect(recorded.data).toMatchObject({ status: 200, seq: 1 })
    // Resume after a given event: with ?after= or with Last-Event-ID.
    const from = recorded.seq
    for (const [query, headers] of [[`?after=${from}`, {}], ["", { "last-event-id": String(from) }]] as const) {
      const rest = await readEvents(query, headers, (es) => es.some((e) => e.type === "attempt.state" && e.rollout_id === a.rolloutId))
      expect(rest[0].seq).toBe(from + 1)
    }
    // Live: a new event reaches an open stream.
    const live = readEvents(`?after=${ids[ids.length - 1]}`, {}, (es) => es.some((e) => e.type === "rollout.created"))
    await new Promise((r) => setTimeout(r, 200))
    const b = await gw.attempt({ live: true })
    expect((await live).some((e) => e.rollout_id === b.rolloutId)).toBe(true)
  })

  it("answers health checks and serves Prometheus metrics", async () => {
    const health = await fetch(`${gw.url}/healthz`)
    expect(health.status).toBe(200)
    expect(await health.json()).toEqual({ status: "ok" })
    const metrics = await fetch(`${gw.url}/metrics`)
    const text = await metrics.text()
    expect(metrics.headers.get("content-type")).toContain("text/plain")
    expect(text).toMatch(/reins_gateway_requests_total\{route="chat.completions",status="200"\} \d+/)
    expect(text).toContain("reins_gateway_request_duration_seconds_bucket")
    expect(text).toContain("reins_gateway_held_calls 0")
    expect(text).toContain("reins_gateway_paused 0")
    expect(text).toContain("reins_gateway_tokens_total")
    expect(text).not.toContain("reins_gateway_device_backend{") // an upstream: no local device
  })
})
