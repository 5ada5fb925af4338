/**
 * `reins serve` as a child process, on the project's default policy (created fresh on first
 * use): kill -9 during a load of calls; after a restart on the same data directory, every call
 * the harnesses saw answered (a JSON body, or a stream's finish chunk) is in the store with its
 * tokens, and the store is consistent (dense sequence numbers per attempt). The restart reuses
 * the default policy it created. A graceful stop during a pause answers the held call.
 */
import OpenAI from "openai"
import { rmSync, statSync } from "node:fs"
import path from "node:path"
import { afterAll, expect, it } from "vitest"
import { type Child, startServe } from "./child.js"
import { tempDir } from "./harness.js"

const ADMIN = "durability-admin"
const MODEL = "reins-default"
const dataDir = tempDir("durability")
const children: Array<Child> = []

afterAll(async () => {
  for (const c of children) await c.kill9()
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

/** What a harness saw answered: request text → output token ids. */
type Answered = Map<string, Array<number>>

it("loses no answered call across kill -9", { timeout: 150_000 }, async () => {
  const serve = () => startServe(["--data", dataDir], { REINS_ADMIN_TOKEN: ADMIN }).then((c) => (children.push(c), c))
  const first = await serve()
  const weights = path.join(dataDir, "models", "default", "model.safetensors")
  const created = statSync(weights).mtimeMs
  const attempts = await Promise.all([1, 2, 3, 4].map(() => admin(first.url, "/api/rollouts", { task: {} })))
  const answered: Answered = new Map()
  // Calls that failed while the gateway was alive are a defect; only those the kill cut are expected.
  const failedBeforeKill: Array<string> = []
  let failedAfterKill = 0
  let killing = false
  let stop = false
  let n = 0
  const worker = async (w: number) => {
    const a = attempts[w % attempts.length]
    const openai = new OpenAI({ baseURL: a.base_url, apiKey: a.attempt_key, maxRetries: 0, timeout: 10_000 })
    while (!stop) {
      const text = `req-${w}-${n++}`
      const request = { model: MODEL, messages: [{ role: "user" as const, content: text }], max_tokens: 6 }
      try {
        if (n % 2 === 0) {
          const r = await openai.chat.completions.create(request)
          answered.set(text, (r.choices[0] as unknown as { token_ids: Array<number> }).token_ids)
        } else {
          const ids: Array<number> = []
          for await (const c of await openai.chat.completions.create({ ...request, stream: true })) {
            ids.push(...((c.choices[0] as unknown as { token_ids?: Array<number> } | undefined)?.token_ids ?? []))
            if (c.choices[0]?.finish_reason) answered.set(text, ids)
          }
          if (!answered.has(text)) throw new Error("the stream ended without a finish_reason")
        }
      } catch (e) {
        // Set before the signal is sent: a call that fails once it is set may have been cut by the kill.
        if (killing) failedAfterKill++
        else failedBeforeKill.push(`${text}: ${String(e)}`)
      }
    }
  }
  const load = Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)))
  for (let i = 0; i < 3000 && answered.size < 150; i++) await new Promise((r) => setTimeout(r, 10))
  killing = true
  await first.kill9()
  stop = true
  await load
  expect(first.proc.signalCode).toBe("SIGKILL")
  expect(answered.size).toBeGreaterThanOrEqual(150)
  expect(failedBeforeKill).toEqual([])
  // The kill came during the load: the 16 harnesses' calls in flight (and any they started after) failed.
  expect(failedAfterKill).toBeGreaterThan(0)

  const second = await serve()
  expect(statSync(weights).mtimeMs).toBe(created) // the default policy is reused, not recreated
  const recorded: Answered = new Map()
  for (const a of attempts) {
    const d = await admin(second.url, `/api/rollouts/${a.rollout_id}`)
    const seqs = d.calls.map((c: any) => c.seq)
    expect(seqs).toEqual(seqs.map((_: number, i: number) => i + 1))
    for (const c of d.calls) {
      if (c.status !== 200) continue
      expect(c.trainable).toBe(true)
      expect(c.output_logprobs).toHaveLength(c.output_token_ids.length)
      recorded.set(c.request.messages[0].content, c.output_token_ids)
    }
  }
  const lost = [...answered.keys()].filter((t) => !recorded.has(t))
  expect(lost).toEqual([])
  for (const [text, ids] of answered) expect(recorded.get(text)).toEqual(ids)

  // The restarted gateway serves and records as before.
  const a = attempts[0]
  const openai = new OpenAI({ baseURL: second.url + "/v1", apiKey: a.attempt_key, maxRetries: 0 })
  const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "after" }], max_tokens: 4 })
  expect(r.usage!.completion_tokens).toBeGreaterThan(0)

  // A graceful stop during a pause answers the held call (503, retry later) and exits cleanly.
  await admin(second.url, "/api/gateway/pause", { mode: "drain" })
  const held = fetch(`${second.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${a.attempt_key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "held" }], max_tokens: 4 })
  })
  for (let i = 0; i < 100 && (await admin(second.url, "/api/gateway/state")).held < 1; i++) await new Promise((r) => setTimeout(r, 20))
  expect(await second.stop()).toBe(0)
  const answer = await held
  expect(answer.status).toBe(503)
  expect(((await answer.json()) as any).error.code).toBe("gateway_shutting_down")
})
