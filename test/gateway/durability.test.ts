/**
 * kill -9 during a load of calls: after a restart on the same data directory, every call the
 * harnesses saw answered (a JSON body, or a stream's finish chunk) is in the store, and the
 * store is consistent (dense sequence numbers per attempt, readable rows).
 */
import OpenAI from "openai"
import { rmSync } from "node:fs"
import { afterAll, beforeAll, expect, it } from "vitest"
import { type Child, startServe } from "./child.js"
import { type FakeUpstream, startFakeUpstream } from "./fakeUpstream.js"
import { tempDir } from "./harness.js"

const ADMIN = "durability-admin"
let upstream: FakeUpstream
const dataDir = tempDir("durability")
const children: Array<Child> = []

beforeAll(async () => {
  upstream = await startFakeUpstream({ delayMs: 2 })
})
afterAll(async () => {
  for (const c of children) await c.kill9()
  await upstream?.close()
  rmSync(dataDir, { recursive: true, force: true })
})

const admin = async (url: string, path: string, body?: unknown) => {
  const res = await fetch(url + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  return (await res.json()) as any
}

it("loses no answered call across kill -9", { timeout: 120_000 }, async () => {
  console.log("TT", Date.now() % 100000, "start")
  const serve = () => startServe(["--upstream", upstream.url, "--data", dataDir], { REINS_ADMIN_TOKEN: ADMIN }).then((c) => (children.push(c), c))
  const first = await serve()
  console.log("TT", Date.now() % 100000, 'const first = await serve()')
  const attempts = await Promise.all([1, 2, 3, 4].map(() => admin(first.url, "/api/rollouts", { task: {} })))
  const answered = new Set<string>()
  let stop = false
  let n = 0
  const worker = async (w: number) => {
    const a = attempts[w % attempts.length]
    const openai = new OpenAI({ baseURL: a.base_url, apiKey: a.attempt_key, maxRetries: 0, timeout: 5_000 })
    while (!stop) {
      const text = `req-${w}-${n++}`
      try {
        if (n % 2 === 0) {
          const r = await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: text }] })
          if (r.choices[0]!.message.content === `echo: ${text}`) answered.add(text)
        } else {
          const s = await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: text }], stream: true })
          for await (const c of s) if (c.choices[0]?.finish_reason) answered.add(text)
        }
      } catch {
        // the gateway died under us: this call was not answered
      }
    }
  }
  const load = Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)))
  for (let i = 0; i < 3000 && answered.size < 200; i++) await new Promise((r) => setTimeout(r, 10))
  console.log("TT", Date.now() % 100000, 'for (let i = 0; i < 3000 && an')
  await first.kill9()
  stop = true
  await load
  console.log("TT", Date.now() % 100000, 'await load')
  expect(first.proc.signalCode).toBe("SIGKILL")

  const second = await serve()
  console.log("TT", Date.now() % 100000, 'const second = await serve()')
  const recorded = new Set<string>()
  for (const a of attempts) {
    const d = await admin(second.url, `/api/rollouts/${a.rollout_id}`)
    const seqs = d.calls.map((c: any) => c.seq)
    expect(seqs).toEqual(seqs.map((_: number, i: number) => i + 1))
    for (const c of d.calls) {
      const content = c.request.messages[0].content
      if (c.status === 200) {
        expect(c.response.choices[0].message.content).toBe(`echo: ${content}`)
        recorded.add(content)
      }
    }
  }
  const lost = [...answered].filter((t) => !recorded.has(t))
  expect(lost).toEqual([])
  console.log("TT", Date.now() % 100000, 'expect(lost).toEqual([])')
  expect(answered.size).toBeGreaterThanOrEqual(200)
  // The restarted gateway serves and records as before.
  const a = attempts[0]
  const openai = new OpenAI({ baseURL: second.url + "/v1", apiKey: a.attempt_key, maxRetries: 0 })
  const r = await openai.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "after" }] })
  expect(r.choices[0]!.message.content).toBe("echo: after")

  // A graceful stop during a pause answers the held call (503, retry later) and exits cleanly.
  await admin(second.url, "/api/gateway/pause", { mode: "drain" })
  const held = fetch(`${second.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${a.attempt_key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: "held" }] })
  })
  for (let i = 0; i < 100 && (await admin(second.url, "/api/gateway/state")).held < 1; i++) await new Promise((r) => setTimeout(r, 20))
  expect(await second.stop()).toBe(0)
  console.log("TT", Date.now() % 100000, 'expect(await second.stop()).to')
  const answer = await held
  expect(answer.status).toBe(503)
  expect(((await answer.json()) as any).error.code).toBe("gateway_shutting_down")
})
