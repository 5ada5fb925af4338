/**
 * The Gateway: store + pause gate + metrics + the HTTP app (OpenAI chat and Responses, Anthropic
 * Messages, admin), over a backend (the policy engine, or an upstream server). `Gateway.layer` builds it; `Gateway.serve` listens.
 *
 *   Gateway.layer({ dataDir })            needs GatewayBackend
 *   engineBackend(format)                 GatewayBackend from a Generator (+ tokenizer & template)
 *   upstreamBackend({ url })              GatewayBackend that proxies to a server speaking the same protocols
 *   Gateway.serve({ host, port })         the HTTP server (needs Gateway)
 *   actorLayer                            the `gateway` actor (GatewayRpcs: Pause/Resume/State) on the node's actor system
 */
import type { HttpApp } from "@effect/platform"
import { HttpMiddleware, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { GatewayError, GatewayRpcs, type GatewayState, type PauseMode, StoreError } from "@reins/protocol"
import { Actor, ActorSystem } from "@reins/runtime"
import { Context, Data, type Duration, Effect, Layer } from "effect"
import { createServer } from "node:http"
import path from "node:path"
import { resolveAdminToken } from "./auth/admin.js"
import { checkAdmin, type SessionAccess } from "./auth/admin.js"
import { checkSession, makeSession } from "./auth/session.js"
import { attemptLogsFromCluster } from "./dashboard/attemptLogs.js"
import { clusterView } from "./dashboard/cluster.js"
import { secretsEqual } from "./auth/keys.js"
import type { Backend } from "./calls/env.js"
import * as PauseGate from "./gate/PauseGate.js"
import { Generator } from "./generator/Generator.js"
import * as Upstream from "./generator/Upstream.js"
import { makeApp } from "./http/router.js"
import * as Metrics from "./metrics.js"
import { loadTextCodec } from "./openai/codec.js"
import * as Conversations from "./prompt/Conversations.js"
import type { PromptFormat } from "./prompt/reuse.js"
import * as SqliteStore from "./store/sqlite/SqliteStore.js"
import { Store, type StoreService } from "./store/Store.js"

export interface GatewayOptions {
  /** Where the store (`reins.db`) and the generated admin token live. */
  readonly dataDir: string
  /** The SQLite file; default `<dataDir>/reins.db`. */
  readonly storeFile?: string | undefined
  /** Request bodies above this get a 413; default 16 MiB. */
  readonly maxBodyBytes?: number | undefined
  /** How long a call may be held by a pause before it gets a 503; default 10 minutes. */
  readonly maxHold?: Duration.DurationInput | undefined
  /** Default: `REINS_ADMIN_TOKEN`, else `<dataDir>/admin-token` (generated, mode 0600). */
  readonly adminToken?: string | undefined
  /** The agent-facing `/v1` URL handed out with new attempts; default derived from the request's Host. */
  readonly publicUrl?: string | undefined
  /** Other model names accepted for the served model. */
  readonly modelAliases?: ReadonlyArray<string> | undefined
}

/** Where tokens come from. */
export class GatewayBackend extends Context.Tag("@reins/gateway/GatewayBackend")<GatewayBackend, Backend>() {}

export interface GatewayService {
  /** Holds new calls and frees the device; succeeds once it is free. */
  readonly pause: (mode: PauseMode) => Effect.Effect<GatewayState, GatewayError>
  /** Releases held calls (served by the possibly new weights). */
  readonly resume: Effect.Effect<GatewayState, GatewayError>
  readonly state: Effect.Effect<GatewayState>
  /** The weights were swapped without a pause (split schedule): serve and record the new version. */
  readonly swapped: Effect.Effect<GatewayState>
  /** The HTTP app (OpenAI and Anthropic routes, admin routes, health, metrics). */
  readonly app: HttpApp.Default
  readonly adminToken: string
  readonly store: StoreService
}

export class Gateway extends Context.Tag("@reins/gateway/Gateway")<Gateway, GatewayService>() {}

export class GatewayStartError extends Data.TaggedError("GatewayStartError")<{ readonly message: string }> {}

const gateBackend = (backend: Backend): PauseGate.GateBackend =>
  backend._tag === "Engine"
    ? {
        pause: (mode) => Effect.mapError(backend.generator.pause(mode), (e) => new GatewayError({ message: e.message })),
        resume: Effect.mapError(backend.generator.resume, (e) => new GatewayError({ message: e.message })),
        model: Effect.map(backend.generator.info, (i) => ({ id: i.id, version: i.version })),
        refresh: Effect.map(backend.generator.refresh, (i) => ({ id: i.id, version: i.version }))
      }
    : {
        // An external server cannot be interrupted: both modes wait for the calls in flight.
        pause: (_mode, idle) => idle,
        resume: Effect.void,
        model: Effect.succeed({ id: backend.upstream.base, version: 0 }),
        refresh: Effect.succeed({ id: backend.upstream.base, version: 0 })
      }

const make = (options: GatewayOptions) =>
  Effect.gen(function* () {
    const backend = yield* GatewayBackend
    const store = yield* Store
    const metrics = yield* Metrics.Metrics
    const adminToken = yield* resolveAdminToken(options.dataDir, options.adminToken).pipe(
      Effect.mapError((e) => new GatewayStartError({ message: e.message }))
    )
    // The node's actor system, when the Gateway runs on one: the dashboard's view of the cluster.
    const system = yield* Effect.serviceOption(ActorSystem)
    const gate = yield* PauseGate.make({ backend: gateBackend(backend), store, metrics, maxHold: options.maxHold })
    const env = {
      backend,
      store,
      metrics,
      gate,
      conversations: Conversations.make(store),
      config: {
        maxBodyBytes: options.maxBodyBytes ?? 16 * 1024 * 1024,
        modelAliases: options.modelAliases ?? [],
        publicUrl: options.publicUrl
      },
      checkAdmin: (headers: Readonly<Record<string, string | undefined>>, access?: SessionAccess) => checkAdmin(adminToken, headers, access),
      cluster: clusterView(system),
      attemptLogs: (attemptId: string) => attemptLogsFromCluster(system, attemptId),
      sessions: {
        open: (given: string) => (secretsEqual(given.trim(), adminToken) ? makeSession(adminToken) : null),
        check: (headers: Readonly<Record<string, string | undefined>>) => checkSession(adminToken, headers)
      }
    }
    const model = yield* gateBackend(backend).model
    if (backend._tag === "Engine") {
      const { backend: device } = yield* backend.generator.info
      if (device !== undefined) metrics.deviceBackend.set({ backend: device }, 1)
    }
    yield* store.recordModelVersion({ version: model.version, modelId: model.id }).pipe(
      Effect.mapError((e) => new GatewayStartError({ message: `cannot record the model version: ${e.message}` }))
    )
    const service: GatewayService = {
      pause: gate.pause,
      resume: gate.resume,
      state: gate.state,
      swapped: gate.swapped,
      app: makeApp(env),
      adminToken,
      store
    }
    return Context.make(Gateway, service).pipe(Context.add(PauseGate.PauseGate, gate))
  })

/** The Gateway and its store, gate and metrics (needs a `GatewayBackend`). */
export const layer = (
  options: GatewayOptions
): Layer.Layer<Gateway | PauseGate.PauseGate | Store | Metrics.Metrics, GatewayStartError | StoreError, GatewayBackend> =>
  Layer.effectContext(make(options)).pipe(
    Layer.provideMerge(Layer.merge(SqliteStore.layer({ filename: options.storeFile ?? path.join(options.dataDir, "reins.db") }), Metrics.layer))
  )

/** A backend that samples with the policy engine behind `Generator`. */
export const engineBackend = (format: PromptFormat): Layer.Layer<GatewayBackend, never, Generator> =>
  Layer.effect(
    GatewayBackend,
    Effect.map(Effect.all([Generator, loadTextCodec]), ([generator, codec]): Backend => ({ _tag: "Engine", generator, format, codec }))
  )

/** A backend that proxies to an external OpenAI-compatible server. */
export const upstreamBackend = (options: Upstream.UpstreamOptions): Layer.Layer<GatewayBackend, Upstream.UpstreamError> =>
  Layer.scoped(GatewayBackend, Effect.map(Upstream.make(options), (upstream): Backend => ({ _tag: "Upstream", upstream })))

export interface ServeOptions {
  readonly host?: string | undefined
  /** 0 picks a free port (read it from `HttpServer.HttpServer`'s address). */
  readonly port: number
}

/** How long open responses (streams, the event stream) may take to finish at shutdown. */
const SHUTDOWN_GRACE_MS = 5_000

const nodeServer = () => {
  const server = createServer()
  // Longer than typical client/proxy idle timeouts, so kept-alive sockets are not cut under them.
  server.keepAliveTimeout = 65_000
  server.headersTimeout = 66_000
  // `close` waits for open responses; endless ones (the event stream) are cut after a grace period.
  const close = server.close.bind(server)
  server.close = ((callback?: (err?: Error) => void) => {
    // Kept-alive sockets become idle as their last response ends: close them as they do.
    const idle = setInterval(() => server.closeIdleConnections(), 50)
    const all = setTimeout(() => server.closeAllConnections(), SHUTDOWN_GRACE_MS)
    close((err?: Error) => {
      clearInterval(idle)
      clearTimeout(all)
      callback?.(err)
    })
    server.closeIdleConnections()
    return server
  }) as typeof server.close
  return server
}

/**
 * Serves the Gateway's HTTP app; the layer's `HttpServer` tells the bound address. At shutdown
 * the gate closes first (held calls get a 503 rather than waiting for a resume that will not
 * come), then the server stops.
 */
export const serve = (options: ServeOptions) =>
  Layer.unwrapEffect(Effect.map(Gateway, (g) => HttpServer.serve(g.app))).pipe(
    // No span per request: nothing here exports traces, and building one (URL parsing, header
    // redaction, attributes) was a measurable share of what the Gateway adds to a call.
    HttpMiddleware.withTracerDisabledWhen(() => true),
    Layer.provideMerge(Layer.scopedDiscard(Effect.flatMap(PauseGate.PauseGate, (gate) => Effect.addFinalizer(() => gate.close)))),
    Layer.provideMerge(NodeHttpServer.layer(nodeServer, { host: options.host ?? "127.0.0.1", port: options.port }))
  )

/**
 * The Gateway as a runtime actor named `gateway`: the Trainer pauses and resumes it by message
 * (Pause / Resume / State), from this process or another node.
 */
export const GatewayActor = Actor.make("gateway", GatewayRpcs)

/** Registers the `gateway` actor on this node's actor system, over the `Gateway` service. */
export const actorLayer = GatewayActor.toLayer(
  Effect.map(Gateway, (g) =>
    GatewayActor.of({
      Pause: ({ mode }: { readonly mode: PauseMode }) => g.pause(mode),
      Resume: () => g.resume,
      State: () => g.state
    }))
)

