/**
 * The dashboard in a real headless Chromium (Debian's `chromium`, driven by playwright-core)
 * against a real Gateway serving the tiny policy with a small recorded run: the login form,
 * attempt keys and stale cookies refused, the rollouts table against the API (values, filters,
 * pages), the token view of a rollout split into two segments, a chart that follows a version
 * published while the page is open, pause/resume, clear pages for bad input, and a non-blank
 * screenshot of each page (also written to $REINS_UI_SCREENSHOTS, for the README, when set).
 */
import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs"
import path from "node:path"
import { attemptFiles } from "@reins/rollout"
import { launcherActorLayer } from "@reins/rollout/controller"
import { ActorSystem } from "@reins/runtime"
import { VersionMetrics } from "@reins/protocol"
import { Effect, Layer, Schema } from "effect"
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { publishVersion, recordSmallRun, type SmallRun, TRAINED, trainerMetrics } from "./dashboardRun.js"
import { ADMIN, type Running, startGateway, tempDir } from "./harness.js"
import { tinyPolicy, type TinyPolicy } from "./policy.js"

const CHROMIUM = process.env.REINS_CHROMIUM ?? "/usr/bin/chromium"
const WAIT = { timeout: 15_000 }

let policy: TinyPolicy
let gw: Running
let run: SmallRun
let browser: Browser
let shots: string
/** Where the local launcher of the Gateway's node would keep attempt logs. */
let launcherDir: string
/** Errors thrown in any page: the dashboard must never end in an uncaught exception. */
const pageErrors: Array<string> = []

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (or set REINS_CHROMIUM)`)
  shots = tempDir("ui-shots")
  launcherDir = tempDir("ui-launcher")
  policy = await tinyPolicy()
  // On a node's actor system with a local launcher, as in `reins train`: the Cluster page lists
  // its node, and attempt logs come from the launcher.
  gw = await startGateway(
    Layer.merge(policy.backend, launcherActorLayer({ kind: "local", dataDir: launcherDir })).pipe(Layer.provideMerge(ActorSystem.layerLocal({ node: "dashboard-node" })))
  )
  run = await recordSmallRun(gw, policy)
  // The split rollout's harness log, where the local launcher writes it (its own path helper).
  const attemptId = (await gw.admin(`/api/rollouts/${run.split}`)).json.attempts[0].id
  const files = attemptFiles(launcherDir, attemptId)
  mkdirSync(files.dir, { recursive: true })
  writeFileSync(files.stdout, "harness: asked 2+2\nharness: answer 4\n")
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"], timeout: 30_000 })
}, 120_000)
afterAll(async () => {
  await browser?.close()
  await gw?.close()
  await policy?.close()
  for (const dir of [shots, launcherDir]) if (dir) rmSync(dir, { recursive: true, force: true })
})

const newPage = async (context?: BrowserContext): Promise<Page> => {
  const page = await (context ?? (await browser.newContext({ viewport: { width: 1280, height: 900 } }))).newPage()
  page.on("pageerror", (e) => pageErrors.push(`${page.url()}: ${e.message}`))
  return page
}

/** A logged-in page (through the form, as a person would). */
const loggedIn = async (): Promise<Page> => {
  const page = await newPage()
  await page.goto(`${gw.url}/ui`)
  await page.fill("#token", ADMIN)
  await Promise.all([page.waitForURL(`${gw.url}/ui`), page.click("button[type=submit]")])
  await page.waitForSelector("header.top nav", WAIT)
  return page
}

/** Distinct colours in a PNG, counted by drawing it on a canvas in a blank page. */
const colours = async (png: Buffer): Promise<number> => {
  const page = await browser.newPage()
  try {
    return await page.evaluate(async (b64) => {
      // Runs in the page: its DOM, not Node's globals.
      const { Image, document } = globalThis as any
      const img = new Image()
      img.src = `data:image/png;base64,${b64}`
      await img.decode()
      const canvas = document.createElement("canvas")
      canvas.width = img.width
      canvas.height = img.height
      const ctx = canvas.getContext("2d")
      ctx.drawImage(img, 0, 0)
      const data: Uint8ClampedArray = ctx.getImageData(0, 0, img.width, img.height).data
      const seen = new Set<number>()
      for (let i = 0; i < data.length; i += 4 * 7) seen.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!)
      return seen.size
    }, png.toString("base64"))
  } finally {
    await page.close()
  }
}

const screenshot = async (page: Page, name: string) => {
  const file = path.join(shots, `${name}.png`)
  const png = await page.screenshot({ path: file, fullPage: true })
  expect(await colours(png), `${name}.png is blank`).toBeGreaterThan(8)
  const keep = process.env.REINS_UI_SCREENSHOTS
  if (keep) {
    mkdirSync(keep, { recursive: true })
    copyFileSync(file, path.join(keep, `${name}.png`))
  }
}

describe("login", () => {
  it("refuses a wrong token and accepts the right one with an HttpOnly SameSite=Strict cookie", async () => {
    const page = await newPage()
    await page.goto(`${gw.url}/ui`)
    await page.waitForSelector("#token")
    await screenshot(page, "login")
    await page.fill("#token", "not-the-token")
    await page.click("button[type=submit]")
    await expect(page.locator("#login-notice").textContent(WAIT)).resolves.toContain("not this Gateway's admin token")
    expect(await page.context().cookies()).toEqual([])
    await page.fill("#token", ADMIN)
    await Promise.all([page.waitForURL(`${gw.url}/ui`), page.click("button[type=submit]")])
    await page.waitForSelector("header.top nav", WAIT)
    const [cookie] = await page.context().cookies()
    expect(cookie).toMatchObject({ name: "reins_session", httpOnly: true, sameSite: "Strict" })
    expect(cookie!.value).not.toContain(ADMIN)
    expect(page.url()).not.toContain(ADMIN)
    // The session reads; it writes nothing but pause and resume.
    const writes = await page.evaluate(async () => {
      const post = (path: string, body: unknown) =>
        fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.status)
      return { list: (await fetch("/api/rollouts")).status, create: await post("/api/rollouts", { task: "from the dashboard" }) }
    })
    expect(writes).toEqual({ list: 200, create: 403 })
    await page.context().close()
  })

  it("does not open pages or data for an attempt key, and a stale cookie gets the login form saying so", async () => {
    const attempt = await gw.attempt()
    const shell = await fetch(`${gw.url}/ui`, { headers: { authorization: `Bearer ${attempt.key}` } })
    const text = await shell.text()
    expect(text).toContain('id="token"')
    expect(text).not.toContain('id="app"')
    for (const p of ["/api/rollouts", `/api/rollouts/${run.split}/tokens`, "/api/events", "/api/versions", "/api/gateway/state"]) {
      const r = await fetch(gw.url + p, { headers: { authorization: `Bearer ${attempt.key}` }, signal: AbortSignal.timeout(10_000) })
      expect(r.status, p).toBe(401)
      await r.body?.cancel()
    }
    const context = await browser.newContext()
    const url = new URL(gw.url)
    for (const value of [attempt.key, "9999999999.forged-signature", "1.expired"]) {
      await context.clearCookies()
      await context.addCookies([{ name: "reins_session", value, domain: url.hostname, path: "/" }])
      const page = await newPage(context)
      const res = await page.goto(`${gw.url}/ui#/rollouts`)
      expect(res!.status()).toBe(401)
      await expect(page.locator("#login-notice").textContent(WAIT)).resolves.toContain("session has expired")
      const api = await page.evaluate(async () => (await fetch("/api/rollouts")).status)
      expect(api).toBe(401)
      await page.close()
    }
    await context.close()
  })
})

describe("pages", () => {
  it("the rollouts table shows the rows the API returns, filters and pages", async () => {
    const page = await loggedIn()
    const all = (await gw.admin("/api/rollouts?limit=500")).json.data
    await page.goto(`${gw.url}/ui#/rollouts?limit=500`)
    await page.waitForSelector(`table.rollouts[data-rows="${all.length}"]`, WAIT)
    expect(await page.locator("table.rollouts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-id")))).toEqual(all.map((r: any) => r.id))
    const split = all.find((r: any) => r.id === run.split)
    const row = page.locator(`tr[data-id="${run.split}"]`)
    expect(await row.locator('[data-col="calls"]').textContent()).toBe(String(split.calls))
    expect(await row.locator('[data-col="tokens"]').textContent()).toBe(String(split.output_tokens))
    expect(await row.locator('[data-col="reward"]').textContent()).toBe("1")
    await page.goto(`${gw.url}/ui#/rollouts`)
    await page.waitForSelector("table.rollouts", WAIT)
    await screenshot(page, "rollouts")

    // Filter with the form: the failed rollouts.
    await page.selectOption("select[name=state]", "failed")
    await page.click(".filters button[type=submit]")
    await page.waitForSelector('table.rollouts[data-query*="state=failed"][data-rows="1"]', WAIT)
    expect(page.url()).toContain("state=failed")

    // Pages of 4: every row once, in order, by the Next button. Each page is read only once the
    // table says it answers the URL's current query (not the previous page's rows).
    const shown = (previous: string | null) =>
      page.waitForFunction((prev) => {
        const { document, location } = globalThis as any
        const key = new URLSearchParams(location.hash.split("?")[1] ?? "").toString()
        const table = document.querySelector(`table.rollouts[data-query="${key}"]`)
        return key !== prev && table !== null ? key : false
      }, previous, WAIT).then((h) => h.jsonValue() as Promise<string>)
    await page.goto(`${gw.url}/ui#/rollouts?limit=4`)
    const seen: Array<string> = []
    let key = await shown(null)
    expect(key).toBe("limit=4")
    for (let n = 0; n < 5; n++) {
      const ids = await page.locator("table.rollouts tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-id")!))
      seen.push(...ids)
      if ((await page.locator("#next-page").count()) === 0) break
      await page.click("#next-page")
      key = await shown(key)
      expect(key).toContain("cursor=")
    }
    expect(seen).toEqual(all.map((r: any) => r.id))
    await page.context().close()
  })

  it("the token view of a rollout split into two segments shows exactly its recorded tokens", async () => {
    const view = (await gw.admin(`/api/rollouts/${run.split}/tokens`)).json
    const page = await loggedIn()
    await page.goto(`${gw.url}/ui#/rollouts/${run.split}`)
    await page.waitForSelector(".token-view", WAIT)
    expect(await page.locator(".segment").evaluateAll((ss) => ss.map((s) => s.getAttribute("data-start")))).toEqual(["first", "history-edited"])
    for (const s of view.segments) {
      const tokens = page.locator(`.segment[data-index="${s.index}"] .tokens .tok`)
      expect(await tokens.count()).toBe(s.tokens)
      expect(await tokens.evaluateAll((ts) => ts.map((t) => t.getAttribute("data-role")))).toEqual(s.roles)
      expect(await tokens.evaluateAll((ts) => ts.map((t) => t.getAttribute("data-version")))).toEqual(s.versions.map((v: number | null) => (v === null ? "" : String(v))))
      // The advantage and loss weight each trained token received (none on untrained ones).
      expect(await tokens.evaluateAll((ts) => ts.map((t) => t.getAttribute("data-advantage")))).toEqual(s.advantages.map((v: number | null) => (v === null ? "" : String(v))))
      expect(await tokens.evaluateAll((ts) => ts.map((t) => t.getAttribute("data-weight")))).toEqual(s.loss_weights.map((v: number | null) => (v === null ? "" : String(v))))
    }
    expect(await page.locator('.segment[data-index="0"] .spans li').evaluateAll((ls) => ls.map((l) => l.getAttribute("data-trained")))).toEqual([String(TRAINED.version), String(TRAINED.version)])
    await expect(page.locator('.segment[data-index="0"] .spans li').first().textContent()).resolves.toContain(`trained into version ${TRAINED.version}: advantage 0.750, loss weight 0.063`)
    await expect(page.locator('.segment[data-index="1"] .spans li').first().textContent()).resolves.toContain("not trained")
    // The recorded tokens: 3 calls, the first two chained, the third after a history edit.
    const calls = (await gw.admin(`/api/rollouts/${run.split}`)).json.calls
    expect(view.segments[0].tokens).toBe(calls[1].prompt_token_ids.length + calls[1].output_token_ids.length)
    expect(view.segments[1].tokens).toBe(calls[2].prompt_token_ids.length + calls[2].output_token_ids.length)
    expect(await page.locator(".conversation .turn").count()).toBeGreaterThanOrEqual(4)
    // The attempt's captured log, opened from its row.
    await page.click(".attempt-log summary")
    await expect(page.locator('.attempt-log .log[data-name="stdout"] pre').textContent(WAIT)).resolves.toContain("harness: answer 4")
    await screenshot(page, "rollout")
    // The other protocols' conversations render too.
    for (const [id, endpoint, text] of [[run.responses, "responses", "Weather in Paris?"], [run.messages, "messages", "Hello there"]] as const) {
      await page.goto(`${gw.url}/ui#/rollouts/${id}`)
      await page.waitForSelector(`.conversation[data-endpoint="${endpoint}"]`, WAIT)
      expect(await page.locator(".conversation").textContent()).toContain(text)
    }
    await page.context().close()
  })

  it("the cluster page shows the node and pauses and resumes the Gateway", async () => {
    const page = await loggedIn()
    await page.goto(`${gw.url}/ui#/cluster`)
    await page.waitForSelector('#gateway-state[data-paused="false"]', WAIT)
    await page.waitForSelector('table.nodes[data-rows="1"]', WAIT)
    expect(await page.locator("table.nodes").textContent()).toContain("dashboard-node")
    // Its last heartbeat: the node itself, so just now (the page shows it relative to its clock).
    const heartbeat = Number(await page.locator("table.nodes td.heartbeat").getAttribute("data-at"))
    expect(Math.abs(Date.now() - heartbeat)).toBeLessThan(30_000)
    expect(await page.locator("table.nodes td.heartbeat").textContent()).toMatch(/^(now|\d+ s ago)$/)
    await page.waitForSelector("#no-launchers", WAIT)
    await page.click("#pause")
    await page.waitForSelector('#gateway-state[data-paused="true"]', WAIT)
    expect((await gw.admin("/api/gateway/state")).json.paused).toBe(true)
    await screenshot(page, "cluster")
    await page.click("#resume")
    await page.waitForSelector('#gateway-state[data-paused="false"]', WAIT)
    expect((await gw.admin("/api/gateway/state")).json.paused).toBe(false)
    await page.context().close()
  })

  it("a chart follows a version published while the page is open, without a reload", async () => {
    const page = await loggedIn()
    await page.goto(`${gw.url}/ui#/runs`)
    await page.waitForSelector('#stream-state:text("live")', WAIT)
    await page.waitForSelector('#chart-versions[data-points="1"]', WAIT)
    // The three rollouts with calls ended under the version that sampled them.
    await page.waitForSelector('#chart-staleness[data-points="3"][data-last="0"]', WAIT)
    await page.evaluate(() => ((globalThis as any).notReloaded = true))
    // A rollout sampled by version 0 that ends after version 1 is out: one version behind.
    const late = await gw.attempt({ late: true })
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${late.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: policy.modelId, messages: [{ role: "user", content: "late" }], max_tokens: 4 })
    })
    expect(r.status).toBe(200)
    const version = await publishVersion(gw, policy)
    await page.waitForSelector('#chart-versions[data-points="2"]', WAIT)
    expect(await page.locator("#current-version").textContent()).toBe(String(version))
    await gw.admin(`/api/attempts/${late.attemptId}/state`, { body: { state: "succeeded" } })
    await page.waitForSelector('#chart-staleness[data-points="4"][data-last="1"]', WAIT)
    // A run's Trainer update and evaluation, as `reins train` records them into the event log.
    await Effect.runPromise(gw.store.recordEvent("trainer.version", Schema.encodeSync(VersionMetrics)(trainerMetrics(version, 4096, 2))))
    await Effect.runPromise(gw.store.recordEvent("evaluation", { split: "test", version, tasks: 50, rollouts: 200, passAt1: 0.835, greedyPassAt1: 0.9, harnessErrors: 0, seconds: 150 }))
    await page.waitForSelector('#chart-trained[data-points="1"][data-last="2048"]', WAIT)
    await page.waitForSelector('#chart-trained-staleness[data-points="1"][data-last="0.25"]', WAIT)
    await page.waitForSelector('#chart-evaluations[data-points="1"][data-last="0.835"]', WAIT)
    expect(await page.locator("#latest-eval").textContent()).toBe(`83.5% (v${version})`)
    expect(await page.evaluate(() => (globalThis as any).notReloaded)).toBe(true)
    expect(Number(await page.locator("#chart-reward").getAttribute("data-points"))).toBe(8)
    await screenshot(page, "runs")
    await page.context().close()
  })
})

describe("bad input", () => {
  it("unknown ids, malformed parameters and unknown pages give clear pages", async () => {
    const page = await loggedIn()
    const cases = [
      ["#/rollouts/ro_0000ffff", "No such rollout", "ro_0000ffff"],
      ["#/rollouts?limit=abc", "could not be listed", "'limit' must be an integer"],
      ["#/rollouts?cursor=zzz", "could not be listed", "'cursor'"],
      ["#/rollouts?colour=red", "could not be listed", "colour"],
      ["#/nowhere/at/all", "No such page", "nowhere"]
    ] as const
    for (const [hash, title, detail] of cases) {
      await page.goto(`${gw.url}/ui${hash}`)
      const box = page.locator(".error[role=alert]")
      await box.waitFor(WAIT)
      expect(await box.textContent(), hash).toContain(title)
      expect(await box.textContent(), hash).toContain(detail)
    }
    const missing = await page.goto(`${gw.url}/ui/no/such/page`)
    expect(missing!.status()).toBe(404)
    expect(await page.locator("[role=alert]").textContent()).toContain("/ui/no/such/page")
    await page.context().close()
    expect(pageErrors).toEqual([])
  })
})
