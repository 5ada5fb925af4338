/**
 * `reins serve [--model DIR] [--http HOST:PORT] [--data DIR] [--upstream URL]`: the Gateway
 * alone, without training. It serves the policy in DIR (or the project's small default policy,
 * created fresh on first use) — or, with `--upstream`, proxies to an external OpenAI-compatible
 * server — and records every call under the data directory. Runs until SIGINT/SIGTERM.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as GatewayModule from "@reins/gateway"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import path from "node:path"
import { type BackendLayer, type ParserSettings, policyBackend } from "../wiring/policyBackend.js"
import { failWith, parseListen } from "./node.js"

const model = Options.directory("model").pipe(
  Options.optional,
  Options.withDescription("Model directory to serve (tokenizer.json, chat_template.jinja, weights). Default: the project's small default policy, created fresh if it does not exist yet.")
)
const http = Options.text("http").pipe(
  Options.withDefault("127.0.0.1:8000"),
  Options.withDescription("HOST:PORT to listen on (port 0 picks a free one). The OpenAI API is under /v1.")
)
const data = Options.directory("data").pipe(
  Options.withDefault(".reins"),
  Options.withDescription("Data directory: the store (reins.db) and the generated admin token (admin-token, mode 0600).")
)
const upstream = Options.text("upstream").pipe(
  Options.optional,
  Options.withDescription("Proxy to this OpenAI-compatible server (e.g. http://127.0.0.1:8001/v1) instead of serving a policy.")
)
const upstreamKey = Options.text("upstream-key").pipe(
  Options.optional,
  Options.withDescription("API key for the upstream (default: $REINS_UPSTREAM_API_KEY).")
)
const upstreamTokenIds = Options.boolean("upstream-token-ids").pipe(
  Options.withDescription("Ask the upstream for token ids and logprobs (vLLM's return_token_ids) so proxied calls are trainable.")
)
const publicUrl = Options.text("public-url").pipe(
  Options.optional,
  Options.withDescription("The /v1 URL harnesses should use (handed out by POST /api/rollouts). Default: from the request's Host header.")
)
const maxHold = Options.integer("max-hold").pipe(
  Options.withDefault(600),
  Options.withDescription("Seconds a call may be held by a pause before it gets 503 + Retry-After.")
)
const toolParser = Options.text("tool-call-parser").pipe(
  Options.optional,
  Options.withDescription("Tool-call parser of the model's Hugging Face template, as vLLM names them: hermes, llama3_json, mistral, none. Default: detected from the template.")
)
const reasoningParser = Options.text("reasoning-parser").pipe(
  Options.optional,
  Options.withDescription("Reasoning parser: qwen3 (<think>…</think> → reasoning_content) or none. Default: detected from the template.")
)
const alias = Options.text("model-alias").pipe(
  Options.repeated,
  Options.withDescription("Another model name to accept for the served model (repeatable).")
)

const serveOptions = { model, http, data, upstream, upstreamKey, upstreamTokenIds, publicUrl, maxHold, alias, toolParser, reasoningParser }
export type ServeArgs = Command.Command.ParseConfig<typeof serveOptions>

/** The device actor in a worker thread of this process, and the Gateway sampling through it. */
const servedPolicy = (dir: string | undefined, data: string, parsers: ParserSettings) =>
  Effect.gen(function* () {
    // The device module loads no TensorFlow.js: the model lives in the device's worker thread.
    const { workerLayer: deviceWorkerLayer } = yield* Effect.promise(() => import("@reins/policy/device"))
    const modelDir = dir ?? path.join(path.resolve(data), "models", "default")
    const layer = policyBackend(parsers).pipe(Layer.provide(deviceWorkerLayer({ modelDir, createDefault: dir === undefined, serveOnly: true })))
    return { description: `policy ${modelDir} in a device worker thread`, layer: layer as BackendLayer }
  })

/** Loaded on use: the other commands need neither the Gateway nor TensorFlow.js at start-up. */
const loadGateway = Effect.promise(() => import("@reins/gateway"))

const backendOf = (args: ServeArgs, Gateway: typeof GatewayModule.Gateway) =>
  Option.match(args.upstream, {
    onSome: (url) =>
      Effect.succeed({
        description: `upstream ${url}`,
        layer: Gateway.upstreamBackend({
          url,
          apiKey: Option.getOrUndefined(args.upstreamKey) ?? process.env.REINS_UPSTREAM_API_KEY,
          tokenIds: args.upstreamTokenIds
        }) as BackendLayer
      }),
    onNone: () => servedPolicy(Option.getOrUndefined(args.model), args.data, { toolParser: Option.getOrUndefined(args.toolParser), reasoningParser: Option.getOrUndefined(args.reasoningParser) })
  })

export const runServe = (args: ServeArgs) =>
  Effect.gen(function* () {
    const { host, port } = yield* parseListen(args.http).pipe(
      Effect.mapError(() => new Error(`--http ${args.http}: expected HOST:PORT (port 0 picks a free one)`))
    )
    if (Option.isSome(args.upstream) && Option.isSome(args.model)) {
      return yield* Effect.fail(new Error("--model and --upstream exclude each other: serve a policy or proxy to a server"))
    }
    if (Option.isSome(args.upstream) && (Option.isSome(args.toolParser) || Option.isSome(args.reasoningParser))) {
      return yield* Effect.fail(new Error("--tool-call-parser and --reasoning-parser apply to a served policy, not to --upstream (the upstream parses its own output)"))
    }
    if (!(args.maxHold > 0)) return yield* Effect.fail(new Error("--max-hold must be a positive number of seconds"))
    const { Gateway } = yield* loadGateway
    const { ActorSystem } = yield* Effect.promise(() => import("@reins/runtime"))
    const backend = yield* backendOf(args, Gateway)
    const dataDir = path.resolve(args.data)
    const gateway = Gateway.layer({
      dataDir,
      maxHold: Duration.seconds(args.maxHold),
      publicUrl: Option.getOrUndefined(args.publicUrl),
      modelAliases: args.alias
    })
    // One actor system for the process: the device actor (worker thread) and the `gateway` actor.
    const app = Layer.merge(Gateway.serve({ host, port }), Gateway.actorLayer).pipe(
      Layer.provideMerge(gateway),
      Layer.provide(backend.layer),
      Layer.provide(ActorSystem.layerLocal())
    )
    yield* Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(app)
        const server = yield* Effect.provide(HttpServer.HttpServer, context)
        const g = yield* Effect.provide(Gateway.Gateway, context)
        const address = server.address._tag === "TcpAddress" ? `http://${server.address.hostname}:${server.address.port}` : server.address.path
        const state = yield* g.state
        yield* Console.log(`reins serve: listening on ${address}/v1 (model ${state.modelId}, version ${state.version}; ${backend.description})`)
        yield* Console.log(
          `reins serve: data in ${dataDir}; admin token ${process.env.REINS_ADMIN_TOKEN ? "from REINS_ADMIN_TOKEN" : `in ${path.join(dataDir, "admin-token")}`}`
        )
        yield* Console.log(`reins serve: dashboard at ${address}/ui (log in with the admin token)`)
        return yield* Effect.never
      })
    )
  })

export const serve = Command.make(
  "serve",
  serveOptions,
  (args) => runServe(args).pipe(failWith("reins serve"))
).pipe(Command.withDescription("Run the Gateway alone (no training): an OpenAI-compatible server that records every call."))
