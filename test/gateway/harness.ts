/** Starts a real Gateway (SQLite store in a temp dir, HTTP on a loopback port) for tests. */
import { HttpServer } from "@effect/platform"
import { Gateway, type Store } from "@reins/gateway"
import { Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"

export const ADMIN = "test-admin-token"

export interface Running {
  readonly url: string
  readonly dataDir: string
  readonly gateway: Gateway.GatewayService
  readonly store: Store["Type"]
  readonly admin: (path: string, init?: { method?: string; body?: unknown }) => Promise<{ status: number; json: any }>
  /** A fresh running attempt: its key and ids. */
  readonly attempt: (task?: unknown) => Promise<{ key: string; rolloutId: string; attemptId: string; baseUrl: string }>
  readonly close: () => Promise<void>
}

export const tempDir = (prefix: string) => mkdtempSync(path.join(os.tmpdir(), `reins-${prefix}-`))

export const startGateway = async (
  backend: Layer.Layer<Gateway.GatewayBackend, unknown>,
  options: Partial<Gateway.GatewayOptions> = {}
): Promise<Running> => {
  const dataDir = options.dataDir ?? tempDir("gw")
  const layer = Gateway.serve({ port: 0 }).pipe(
    Layer.provideMerge(Gateway.layer({ adminToken: ADMIN, ...options, dataDir })),
    Layer.provide(backend)
  )
  const runtime = ManagedRuntime.make(layer)
  try {
    const { address, gateway } = await runtime.runPromise(
      Effect.all({ address: Effect.map(HttpServer.HttpServer, (s) => s.address), gateway: Gateway.Gateway })
    )
    if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
    const url = `http://127.0.0.1:${address.port}`
    const admin: Running["admin"] = async (p, init) => {
      const res = await fetch(url + p, {
        method: init?.method ?? (init?.body === undefined ? "GET" : "POST"),
        headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
        body: init?.body === undefined ? undefined : JSON.stringify(init.body)
      })
      const text = await res.text()
      return { status: res.status, json: text ? JSON.parse(text) : null }
    }
    return {
      url,
      dataDir,
      gateway,
      store: gateway.store,
      admin,
      attempt: async (task = { q: "t" }) => {
        const r = await admin("/api/rollouts", { body: { task } })
        if (r.status !== 201) throw new Error(`POST /api/rollouts: ${r.status} ${JSON.stringify(r.json)}`)
        return { key: r.json.attempt_key, rolloutId: r.json.rollout_id, attemptId: r.json.attempt_id, baseUrl: r.json.base_url }
      },
      close: async () => {
        await runtime.dispose()
        if (options.dataDir === undefined) rmSync(dataDir, { recursive: true, force: true })
      }
    }
  } catch (e) {
    await runtime.dispose()
    rmSync(dataDir, { recursive: true, force: true })
    throw e
  }
}

/** True when `prefix` is where `of` starts: a later call's prompt extends an earlier call's ids. */
export const isPrefix = (prefix: ReadonlyArray<number>, of: ReadonlyArray<number>): boolean =>
  prefix.length <= of.length && prefix.every((v, i) => of[i] === v)

/** The recorded calls of a rollout, as the admin API shows them. */
export const callsOf = async (gw: Running, rolloutId: string): Promise<Array<any>> => (await gw.admin(`/api/rollouts/${rolloutId}`)).json.calls as Array<any>
