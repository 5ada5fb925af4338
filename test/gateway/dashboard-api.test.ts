/**
 * The admin API's reads for the dashboard and `reins rollouts`, on a real Gateway serving the tiny
 * policy with a small recorded run: list rows with their calls, tokens and versions, filters and
 * cursor pages, named 400s for malformed parameters, the token view of a rollout split into two
 * segments, model versions; and the `reins rollouts` CLI as a real child process.
 */
import { Gateway } from "@reins/gateway"
import { Effect } from "effect"
import { rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { killReinsChildren, runReins } from "../reinsCli.js"
import { startFakeUpstream } from "./fakeUpstream.js"
import { type SmallRun, publishVersion, recordSmallRun, TRAINED } from "./dashboardRun.js"
import { ADMIN, type Running, startGateway, tempDir } from "./harness.js"
import { tinyPolicy, type TinyPolicy } from "./policy.js"

let policy: TinyPolicy
let gw: Running
let run: SmallRun

beforeAll(async () => {
  policy = await tinyPolicy()
  gw = await startGateway(policy.backend)
  run = await recordSmallRun(gw, policy)
}, 120_000)
afterAll(async () => {
  killReinsChildren()
  await gw?.close()
  await policy?.close()
})

const list = async (query: string) => {
  const r = await gw.admin(`/api/rollouts${query}`)
  return r
}

describe("rollout list rows", () => {
  it("add calls, tokens, versions and duration from the recorded calls", async () => {
    const r = await list("?limit=500")
    expect(r.status).toBe(200)
    expect(r.json.data.map((row: any) => row.id)).toEqual(run.all)
    const detail = (await gw.admin(`/api/rollouts/${run.split}`)).json
    const row = r.json.data.find((x: any) => x.id === run.split)
    expect(row.calls).toBe(3)
    expect(row.prompt_tokens).toBe(detail.calls.reduce((n: number, c: any) => n + c.prompt_token_ids.length, 0))
    expect(row.output_tokens).toBe(detail.calls.reduce((n: number, c: any) => n + c.output_token_ids.length, 0))
    expect(row.versions).toEqual({ min: 0, max: 0 })
    expect(row.reward).toBe(1)
    expect(row.duration_ms).toBeGreaterThanOrEqual(0)
    const running = r.json.data.find((x: any) => x.state === "running")
    expect(running).toMatchObject({ calls: 0, output_tokens: 0, versions: { min: null, max: null }, duration_ms: null })
  })

  it("filter by state, group, version and reward", async () => {
    const ids = async (q: string) => (await list(q)).json.data.map((x: any) => x.id)
    expect(await ids("?state=failed")).toHaveLength(1)
    expect(await ids("?group=g-even")).toHaveLength(3)
    expect(await ids("?group=g-chat")).toEqual([run.responses, run.split])
    expect(await ids("?version=0")).toEqual([run.messages, run.responses, run.split])
    expect(await ids("?version=7")).toEqual([])
    // Rewards of 0.5: the Messages rollout and the failed one.
    const half = (await list("?min_reward=0.45&max_reward=0.55")).json.data
    expect(half.map((x: any) => x.reward)).toEqual([0.5, 0.5])
    expect(half.map((x: any) => x.id)).toContain(run.messages)
    expect((await list("?min_reward=0.3")).json.data.every((x: any) => x.reward >= 0.3)).toBe(true)
  })

  it("pages with cursors through every row exactly once", async () => {
    const seen: Array<string> = []
    let cursor: string | null = null
    for (let page = 0; page < 10; page++) {
      const r: { json: any } = await list(`?limit=4${cursor ? `&cursor=${cursor}` : ""}`)
      seen.push(...r.json.data.map((x: any) => x.id))
      cursor = r.json.next_cursor
      if (cursor === null) break
    }
    expect(seen).toEqual(run.all)
  })

  it("refuses malformed parameters by name", async () => {
    for (const [query, param] of [
      ["?limit=abc", "limit"],
      ["?limit=0", "limit"],
      ["?cursor=not-a-cursor", "cursor"],
      ["?version=-1", "version"],
      ["?min_reward=lots", "min_reward"],
      ["?state=done", "state"],
      ["?colour=red", "colour"]
    ] as const) {
      const r = await list(query)
      expect(r.status, query).toBe(400)
      expect(r.json.error.param, query).toBe(param)
      expect(r.json.error.message, query).toMatch(param)
    }
  })
})

describe("token view", () => {
  it("shows exactly the recorded tokens of a rollout split into two segments", async () => {
    const calls = (await gw.admin(`/api/rollouts/${run.split}`)).json.calls
    const view = await gw.admin(`/api/rollouts/${run.split}/tokens`)
    expect(view.status).toBe(200)
    expect(view.json.has_text).toBe(true)
    const segments = view.json.segments
    expect(segments.map((s: any) => s.start)).toEqual(["first", "history-edited"])
    expect(calls.map((c: any) => c.reuse.break)).toEqual([null, null, "history-edited"])
    // Segment 0 is calls 1 and 2 (the second extends the first); segment 1 is call 3 alone.
    const [a, b] = segments
    expect(a.calls.map((c: any) => c.seq)).toEqual([1, 2])
    expect(b.calls.map((c: any) => c.seq)).toEqual([3])
    expect(a.token_ids).toEqual([...calls[1].prompt_token_ids, ...calls[1].output_token_ids])
    expect(b.token_ids).toEqual([...calls[2].prompt_token_ids, ...calls[2].output_token_ids])
    for (const s of segments) {
      expect(s.tokens).toBe(s.token_ids.length)
      expect(s.text).toHaveLength(s.tokens)
      expect(s.roles).toHaveLength(s.tokens)
    }
    // Roles: the first call's prompt, its output (action), the tokens the second call added (observation), its output.
    const p0 = calls[0].prompt_token_ids.length
    const o0 = calls[0].output_token_ids.length
    const p1 = calls[1].prompt_token_ids.length
    const o1 = calls[1].output_token_ids.length
    const expected = [...Array(p0).fill("prompt"), ...Array(o0).fill("action"), ...Array(p1 - p0 - o0).fill("observation"), ...Array(o1).fill("action")]
    expect(a.roles).toEqual(expected)
    expect(a.action_tokens).toBe(o0 + o1)
    expect(a.logprobs.filter((x: any) => x !== null)).toEqual([...calls[0].output_logprobs, ...calls[1].output_logprobs])
    expect(a.versions.filter((x: any) => x !== null)).toEqual([...calls[0].versions, ...calls[1].versions])
    expect(b.roles.filter((r: string) => r === "action")).toHaveLength(calls[2].output_token_ids.length)
    expect(a.text.join("")).toBe(policy.tokenizer.decode(a.token_ids.slice(0, p0)) + a.text.slice(p0).join(""))
    // What the update recorded: call 1 trained whole, call 2 in its first tokens, call 3 not at all.
    const trained = { version: TRAINED.version, advantage: TRAINED.advantage, loss_weight: TRAINED.weight }
    expect(a.calls.map((c: any) => c.trained)).toEqual([{ ...trained, tokens: o0 }, { ...trained, tokens: TRAINED.secondTokens }])
    expect(b.calls[0].trained).toBeNull()
    const mark = (v: number) => [...Array(p0).fill(null), ...Array(o0).fill(v), ...Array(p1 - p0 - o0).fill(null), ...Array(TRAINED.secondTokens).fill(v), ...Array(o1 - TRAINED.secondTokens).fill(null)]
    expect(a.advantages).toEqual(mark(TRAINED.advantage))
    expect(a.loss_weights).toEqual(mark(TRAINED.weight))
    expect(b.advantages.every((x: unknown) => x === null)).toBe(true)
    expect(b.loss_weights.every((x: unknown) => x === null)).toBe(true)
  })

  it("answers 404 for an unknown rollout", async () => {
    const r = await gw.admin("/api/rollouts/ro_0000/tokens")
    expect(r.status).toBe(404)
    expect(r.json.error.message).toMatch("ro_0000")
  })
})

describe("reins rollouts and reins ui", () => {
  it("lists and shows rollouts against the running Gateway, tokens in ANSI colours", async () => {
    const data = tempDir("rollouts-cli")
    writeFileSync(path.join(data, "admin-token"), ADMIN + "\n")
    const env = { REINS_ADMIN_TOKEN: "", FORCE_COLOR: "1" }
    const [listed, shown, refused, ui] = await Promise.all([
      runReins(["rollouts", "list", "--url", gw.url, "--data", data, "--group", "g-chat", "--json"], 60_000, env),
      runReins(["rollouts", "show", run.split, "--url", gw.url, "--data", data, "--tokens"], 60_000, env),
      runReins(["rollouts", "show", "ro_0000", "--url", gw.url], 60_000, { REINS_ADMIN_TOKEN: ADMIN }),
      runReins(["ui", "--url", gw.url, "--data", data], 60_000, env)
    ]).finally(() => rmSync(data, { recursive: true, force: true }))
    expect(listed.code, listed.stderr).toBe(0)
    expect(JSON.parse(listed.stdout).data.map((r: any) => r.id)).toEqual([run.responses, run.split])
    expect(shown.code, shown.stderr).toBe(0)
    expect(shown.stdout).toContain(`rollout ${run.split}  succeeded`)
    expect(shown.stdout).toMatch(/segment 0 .*start: first/)
    expect(shown.stdout).toMatch(/segment 1 .*start: history-edited/)
    expect(shown.stdout).toContain(`call #1, tokens`)
    expect(shown.stdout).toMatch(/call #2, tokens \d+-\d+: trained into version 1, advantage 0\.750, loss weight 0\.063 on 2 tokens/)
    expect(shown.stdout).toMatch(/call #3, tokens \d+-\d+: not trained/)
    expect(shown.stdout).toContain("\u001b[36m")
    expect(shown.stdout).toMatch(/\u001b\[4[123];/)
    expect(ui.code, ui.stderr).toBe(0)
    expect(ui.stdout).toContain(`The dashboard: ${gw.url}/ui`)
    expect(ui.stdout).toContain(path.join(data, "admin-token"))
    expect(refused.code).toBe(1)
    expect(refused.stderr).toMatch(/reins rollouts show: .*ro_0000.*not found/)
  })
})

describe("attempt logs", () => {
  it("say why there are none without a cluster node to ask its launchers, and 404 for an unknown attempt", async () => {
    const attemptId = (await gw.admin(`/api/rollouts/${run.split}`)).json.attempts[0].id
    const r = await gw.admin(`/api/attempts/${attemptId}/logs`)
    expect(r.status).toBe(200)
    expect(r.json).toMatchObject({ attempt_id: attemptId, available: false, logs: [] })
    expect(r.json.reason).toMatch("without a cluster node, so there is no launcher to ask")
    expect((await gw.admin("/api/attempts/at_00ff/logs")).status).toBe(404)
  })
})

describe("cluster", () => {
  it("has no nodes to report for a Gateway without an actor system", async () => {
    const r = await gw.admin("/api/cluster")
    expect(r.status).toBe(200)
    expect(r.json).toEqual({ node: null, nodes: [], launchers: null, controller: null })
  })
})

describe("model versions", () => {
  it("lists every version served, a published one included", async () => {
    const before = (await gw.admin("/api/versions")).json.data
    expect(before.map((v: any) => v.version)).toEqual([0])
    const v = await publishVersion(gw, policy)
    const after = (await gw.admin("/api/versions")).json.data
    expect(after.map((x: any) => x.version)).toEqual([0, v])
  })
})

describe("a large store", () => {
  it("pages, filters and summarizes 20,000 rollouts without loading the table", async () => {
    const upstream = await startFakeUpstream()
    const big = await startGateway(Gateway.upstreamBackend({ url: upstream.url }))
    try {
      const N = 20_000
      await Effect.runPromise(
        Effect.forEach(Array.from({ length: N }, (_, i) => i), (i) => big.store.createRollout({ task: { i }, group: `g${i % 100}`, start: i % 3 === 0 }), { discard: true })
      )
      const timed = async (query: string) => {
        const start = performance.now()
        const r = await big.admin(`/api/rollouts${query}`)
        expect(r.status, query).toBe(200)
        return { json: r.json, ms: performance.now() - start }
      }
      const first = await timed("?limit=100")
      expect(first.json.data).toHaveLength(100)
      // 50 pages deep by cursor, a filtered page, and filters nothing matches (the worst case: a scan).
      let cursor = first.json.next_cursor
      for (let page = 0; page < 50; page++) cursor = (await timed(`?limit=100&cursor=${cursor}`)).json.next_cursor
      const deep = await timed(`?limit=100&cursor=${cursor}`)
      expect(deep.json.data[0].task).toEqual({ i: N - 1 - 51 * 100 })
      const grouped = await timed("?group=g7&state=running&limit=50")
      expect(grouped.json.data.every((r: any) => r.group === "g7" && r.state === "running")).toBe(true)
      const none = await timed("?version=3")
      expect(none.json.data).toEqual([])
      const noReward = await timed("?min_reward=0")
      expect(noReward.json.data).toEqual([])
      // Bounded generously for a loaded 2-core machine; a full load and decode of 20k rows per page would be far slower.
      for (const r of [first, deep, grouped, none, noReward]) expect(r.ms).toBeLessThan(1_500)
    } finally {
      await big.close()
      await upstream.close()
    }
  }, 120_000)
})
