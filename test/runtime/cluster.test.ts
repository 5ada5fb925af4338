/**
 * Three `reins node` processes on loopback: they form a cluster, one is killed with SIGKILL and
 * marked down within the bound while calls to it fail fast, it comes back and rejoins; a wrong
 * secret is refused; garbage and oversized frames leave a node running.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ActorSystem, Cluster, type ClusterStatus, type MemberEvent, Node, Probe } from "@reins/runtime"
import { Chunk, Effect, Either, Fiber, Redacted, type Scope, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import { freePort, killAll, type NodeProcess, reins, startNode, until } from "./fixtures/processes.js"
import { authenticated, Wire } from "./fixtures/wire.js"

const secretValue = `cluster-test-${randomBytes(12).toString("hex")}`
const secret = Redacted.make(secretValue)
const env = { REINS_CLUSTER_SECRET: secretValue }
/** The nodes' failure detector, as configured here (the default down-after, given explicitly). */
const DOWN_AFTER_S = 4
const detector = Node.detectorTiming(`${DOWN_AFTER_S} seconds`)
/** The documented bound: a member that stops answering is down within 5 s (default settings). */
const DOCUMENTED_DOWN_BOUND_MS = 5_000
/**
 * What the margin over the detector's worst case can never be below: the kill and the clock reads
 * around it, which no round trip measures.
 */
const MARGIN_FLOOR_MS = 100

let dir: string
let a: NodeProcess
let b: NodeProcess
let c: NodeProcess
let ports: Record<"a" | "b" | "c", number>
const nodeArgs = (name: "a" | "b" | "c", roles: string, join?: string) => [
  "--roles", roles,
  "--listen", `127.0.0.1:${ports[name]}`,
  "--data", path.join(dir, name),
  ...(join ? ["--join", join] : []),
  "--down-after", String(DOWN_AFTER_S),
  ...(name === "a" ? ["--max-frame-bytes", String(1024 * 1024)] : [])
]

const status = (address: string) => Effect.runPromise(Cluster.status({ join: address, secret }))
const byId = (s: ClusterStatus, id: string) => s.nodes.find((n) => n.id === id)

/** Runs `f` with a client connected to `address`. */
const withClient = <A, E>(address: string, f: Effect.Effect<A, E, ActorSystem | Scope.Scope>) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const client = yield* Cluster.connect({ join: address, secret })
      return yield* Effect.provideService(f, ActorSystem, client.system)
    }).pipe(Effect.scoped) as Effect.Effect<A, unknown>
  )

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), "reins-cluster-"))
  ports = { a: await freePort(), b: await freePort(), c: await freePort() }
  const seed = `ws://127.0.0.1:${ports.a}`
  // b and c keep trying to join until a listens
  ;[a, b, c] = await Promise.all([
    startNode(nodeArgs("a", "gateway"), env),
    startNode(nodeArgs("b", "trainer", seed), env),
    startNode(nodeArgs("c", "rollout", seed), env)
  ])
}, 150_000)

afterAll(async () => {
  await killAll()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

describe("a three-node cluster", () => {
  it("forms: `reins status --json` shows 3 up with their actors; a wrong secret is refused", async () => {
    await until("3 members up", async () => {
      const s = await status(a.address)
      return s.nodes.length === 3 && s.nodes.every((n) => n.status === "up" && n.actors.length > 0) ? s : undefined
    }, 30_000)

    const ok = reins(["status", "--join", b.address, "--json"], env)
    const wrong = await Effect.runPromise(
      Effect.flip(Cluster.status({ join: a.address, secret: Redacted.make("this-is-not-the-cluster-secret") }))
    )
    expect(wrong).toMatchObject({ _tag: "ClusterConnectError" })
    expect(wrong.message).toContain("wrong cluster secret")
    await until("the refusal in a's log", () => (a.output().includes("wrong cluster secret") ? true : undefined), 10_000)

    const okCode = await ok.exited
    const printedAt = Date.now()
    expect(okCode, ok.output()).toBe(0)
    const printed = JSON.parse(ok.output().trim().split("\n").at(-1)!) as ClusterStatus
    // b last heard of each member within the failure detector's window (they are all up).
    for (const n of printed.nodes) {
      expect(n.lastHeartbeat, n.id).toBeGreaterThan(printedAt - detector.downAfterMs - 10_000)
      expect(n.lastHeartbeat, n.id).toBeLessThanOrEqual(printedAt)
    }
    expect(printed.nodes.map((n) => n.id).sort()).toEqual([a.id, b.id, c.id].sort())
    expect(printed.nodes.every((n) => n.status === "up")).toBe(true)
    expect(byId(printed, a.id)).toMatchObject({ address: a.address, roles: ["gateway"], actors: ["gateway"] })
    expect(byId(printed, b.id)).toMatchObject({ address: b.address, roles: ["trainer"], actors: ["trainer"] })
    expect(byId(printed, c.id)).toMatchObject({ address: c.address, roles: ["rollout"], actors: [`rollout/${c.id}`] })
  }, 90_000)

  it("carries calls across nodes: packed token ids, streams, and relays between nodes", async () => {
    await withClient(a.address, Effect.gen(function*() {
      const trainer = yield* Probe.actor("trainer").client
      const ids = Int32Array.from({ length: 2048 }, (_, i) => (i * 40503) ^ 0x5bd1e995)
      const echoed = yield* trainer.Echo({ ids })
      expect(Array.from(echoed.ids)).toEqual(Array.from(ids))
      expect(echoed.sum).toBe(ids.reduce((x, y) => x + y, 0))
      const counted = Chunk.toReadonlyArray(yield* Stream.runCollect(trainer.Count({ n: 1000 })))
      expect(counted.length).toBe(1000)
      expect(counted.at(-1)).toBe(1000)

      const gateway = yield* Probe.actor("gateway").client
      const viaA = yield* gateway.Relay({ actor: "trainer" })
      expect(Either.getOrThrow(viaA)).toMatchObject({ actor: "trainer", node: b.id })
      const toRollout = yield* gateway.Relay({ actor: `rollout/${c.id}` })
      expect(Either.getOrThrow(toRollout)).toMatchObject({ actor: `rollout/${c.id}`, node: c.id })
    }))
  }, 60_000)

  it("marks a killed node down within the bound, tells watchers, and fails calls to it fast", async () => {
    const rollout = `rollout/${c.id}`
    await withClient(b.address, Effect.gen(function*() {
      const watched = yield* ActorSystem.pipe(
        Effect.flatMap((system) =>
          system.events.pipe(
            Stream.filter((e: MemberEvent) => e._tag === "MemberDown" && e.member.id === c.id),
            Stream.take(1),
            Stream.runCollect,
            Effect.fork
          )
        )
      )
      yield* Effect.sleep("200 millis")
      // Kill c just after a heartbeat of its own reached this client: it went to the survivors in
      // the same breath, so their silence starts at the kill and detection should take down-after
      // plus at most one look — not anywhere in a heartbeat's width below that.
      const system = yield* ActorSystem
      const versionOfC = Effect.map(system.members, (ms) => ms.find((m) => m.id === c.id && m.status === "up")?.version)
      let before = yield* versionOfC
      for (let polls = 0; before === undefined || (yield* versionOfC) === before; polls++) {
        expect(polls, `a heartbeat from ${c.id}`).toBeLessThan(20_000)
        yield* Effect.sleep("1 millis")
        before ??= yield* versionOfC
      }
      const killedAt = Date.now()
      c.process.kill("SIGKILL")

      // right away (before anyone marked it down): calls fail fast, they do not hang
      const gateway = yield* Probe.actor("gateway").client
      const early = yield* gateway.Relay({ actor: rollout }).pipe(Effect.timeout("3 seconds"))
      expect(Either.isLeft(early) && early.left).toMatchObject({ _tag: "ActorUnavailable", actor: rollout })

      // Both survivors mark it down after the silence and within the detector's worst case
      // (silence, then one look), give or take a margin for how late their event loops run on
      // this machine now: every status round trip goes through the survivor's loop, so twice the
      // slowest one covers a late look and a late-delivered last heartbeat. Watched side by side
      // from the kill on, so each has its own samples.
      expect(detector.worstMs).toBeLessThanOrEqual(DOCUMENTED_DOWN_BOUND_MS)
      const marks = yield* Effect.promise(() =>
        Promise.all([a, b].map(async (survivor) => {
          let slowest = 0
          const seen = await until(`${survivor.id} to mark ${c.id} down`, async () => {
            const sent = performance.now()
            const entry = byId(await status(survivor.address), c.id)
            slowest = Math.max(slowest, performance.now() - sent)
            return entry?.status === "down" ? entry : undefined
          }, 20_000)
          // how long it had heard nothing of c when it marked c down (its own last news, not ours)
          const silent = Math.round(seen.since - seen.lastHeartbeat!)
          return { survivor, after: seen.since - killedAt, silent, margin: Math.max(MARGIN_FLOOR_MS, Math.ceil(2 * slowest)), slowest }
        }))
      )
      for (const { survivor, after, silent, margin, slowest } of marks) {
        const bound = { low: detector.downAfterMs - margin, high: detector.worstMs + margin }
        console.log(
          `${survivor.id} marked ${c.id} down ${after} ms after the kill, ${silent} ms after its last news of it; bounds ${bound.low}..${bound.high} ms = down-after ${detector.downAfterMs} ` +
            `(+ one look ${detector.checkMs}) ∓ margin ${margin} (2 × slowest status round trip ${Math.round(slowest)} ms, at least ${MARGIN_FLOOR_MS})`
        )
        expect(after, `${survivor.id}: ms from the kill to down`).toBeLessThanOrEqual(bound.high)
        // Not before the silence: measured from the survivor's own last news of c. (From the kill it
        // can look early: under load the heartbeat this client saw last may not have reached it.)
        expect(silent, `${survivor.id}: ms from its last news of ${c.id} to down (not before the silence)`).toBeGreaterThanOrEqual(bound.low)
      }
      // The survivors' last news of c is from before the kill (the heartbeat waited for above).
      for (const survivor of [a, b]) {
        const last = byId(yield* Effect.promise(() => status(survivor.address)), c.id)!.lastHeartbeat!
        expect(last, `${survivor.id}'s last heartbeat of ${c.id}`).toBeLessThanOrEqual(killedAt + MARGIN_FLOOR_MS)
        expect(last, `${survivor.id}'s last heartbeat of ${c.id}`).toBeGreaterThan(killedAt - 2 * detector.downAfterMs)
      }
      // this watcher (a client of b) was told
      const events = Chunk.toReadonlyArray(yield* Fiber.join(watched).pipe(Effect.timeout("10 seconds")))
      expect(events[0]).toMatchObject({ _tag: "MemberDown", reason: "timeout", member: { id: c.id } })

      // calls to the down node fail fast with the tagged error, from a node and from a client
      const relayed = yield* gateway.Relay({ actor: rollout }).pipe(Effect.timeout("3 seconds"))
      expect(Either.isLeft(relayed) && relayed.left).toMatchObject({ _tag: "ActorUnavailable", actor: rollout, node: c.id, reason: "node-down" })
      const direct = yield* Probe.actor("rollout").ref(rollout).pipe(Effect.flatMap((r) => Effect.flip(r.Ping())), Effect.timeout("3 seconds"))
      expect(direct).toMatchObject({ _tag: "ActorUnavailable", node: c.id, reason: "node-down" })
    }))
  }, 90_000)

  it("lets the restarted node rejoin as itself", async () => {
    const before = byId(await status(a.address), c.id)!
    c = await startNode(nodeArgs("c", "rollout", a.address), env) // same data dir and port: same id
    const rejoined = await until("c to rejoin", async () => {
      const s = await status(a.address)
      const entry = byId(s, c.id)
      return s.nodes.every((n) => n.status === "up") && entry && entry.incarnation > before.incarnation && entry.actors.length > 0
        ? s
        : undefined
    }, 45_000)
    expect(rejoined.nodes.length).toBe(3)
    expect(byId(rejoined, c.id)).toMatchObject({ address: c.address, actors: [`rollout/${c.id}`] })
    const pong = await withClient(a.address, Effect.flatMap(Probe.actor("gateway").client, (g) => g.Relay({ actor: `rollout/${c.id}` })))
    expect(Either.getOrThrow(pong)).toMatchObject({ node: c.id })
  }, 90_000)

  it("keeps running through garbage bytes and an oversized frame", async () => {
    const port = Number(new URL(a.address).port)
    const tcp = net.connect(port, "127.0.0.1")
    tcp.on("error", () => {})
    tcp.resume()
    const tcpClosed = new Promise((done) => tcp.on("close", done))
    tcp.write(randomBytes(4096))
    await tcpClosed

    const big = await authenticated(a.address, secret)
    big.ws.send(Wire.encode([Wire.Kind.Gossip, new Uint8Array(2 * 1024 * 1024)]))
    expect(await big.closed).toBe(1009)

    expect(a.process.exitCode).toBe(null)
    const after = await status(a.address)
    expect(after.nodes.filter((n) => n.status === "up").length).toBe(3)
    await until("a to log the oversized frame", () => (/Max payload size exceeded/i.test(a.output()) ? true : undefined), 10_000)
  }, 60_000)
})
