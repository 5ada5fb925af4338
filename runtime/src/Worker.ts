/**
 * Actors in worker threads, so long compute (a model's forward/backward) never blocks the node's
 * event loop. Effect's own machinery carries the calls: `RpcClient.layerProtocolWorker` on the
 * node, `RpcServer.layerProtocolWorkerRunner` in the worker, `NodeWorker`/`NodeWorkerRunner` from
 * @effect/platform-node underneath.
 *
 * On the node, the worker actor is an ordinary supervised actor whose handlers forward each call
 * to the worker, so local callers, remote callers and supervision work exactly as for any actor.
 * If the worker dies or exits, the actor crashes and restarts with a fresh worker.
 *
 * A compiled entry (`.js`, what an installed reins runs) starts directly. A TypeScript entry (this
 * repository's sources, under `--conditions=reins-source`) starts at `worker-bootstrap.mjs`, which
 * registers tsx's loader in the thread and imports the entry (Node 20 ignores `--import tsx` for
 * workers); tsx is then an (optional) peer dependency.
 */
import * as NodeWorker from "@effect/platform-node/NodeWorker"
import * as NodeWorkerRunner from "@effect/platform-node/NodeWorkerRunner"
import * as RpcClient from "@effect/rpc/RpcClient"
import { RpcClientError } from "@effect/rpc/RpcClientError"
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import * as RpcSchema from "@effect/rpc/RpcSchema"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Cause, Effect, Layer, type Scope, Stream } from "effect"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as WorkerThreads from "node:worker_threads"
import { ActorContext } from "./ActorContext.js"
import type { RestartPolicy } from "./Supervisor.js"

/** The `.mjs` file a worker thread with a TypeScript entry starts from. */
export const bootstrapPath = fileURLToPath(new URL("./worker-bootstrap.mjs", import.meta.url))

export interface WorkerActorOptions {
  /** The worker's entry module (a path or file URL; `.ts` starts through tsx). It calls `Worker.serve`. */
  readonly entry: string | URL
  /** As in `ActorOptions`: the registered name (default: the actor's name). */
  readonly name?: string | ((node: string) => string)
  readonly restart?: RestartPolicy
  /** Passed to the worker, where `Worker.data()` returns it (structured-cloned). */
  readonly data?: unknown
  readonly resourceLimits?: WorkerThreads.ResourceLimits
}

const entryUrl = (entry: string | URL) =>
  entry instanceof URL ? entry.href : entry.startsWith("file:") ? entry : pathToFileURL(entry).href

const isTypeScript = (url: string) => /\.[cm]?ts$/.test(new URL(url).pathname)

/** Starts a worker thread running `entry`: directly, or through the tsx bootstrap when it is TypeScript. */
const spawnThread = (options: WorkerActorOptions) => {
  const url = entryUrl(options.entry)
  return new WorkerThreads.Worker(isTypeScript(url) ? bootstrapPath : new URL(url), {
    workerData: { entry: url, data: options.data },
    ...(options.resourceLimits ? { resourceLimits: options.resourceLimits } : {})
  })
}

const isStreamRpc = (rpc: Rpc.Any) => RpcSchema.isStreamSchema((rpc as unknown as Rpc.AnyWithProps).successSchema)

/** A handler per request of `group`, made by `f` from the request's tag and whether it streams. */
const handlersFor = <H>(group: RpcGroup.RpcGroup<Rpc.Any>, f: (tag: string, isStream: boolean) => H): Record<string, H> =>
  Object.fromEntries([...group.requests.values()].map((rpc) => [rpc._tag, f(rpc._tag, isStreamRpc(rpc))]))

/** In a worker: the `data` the node passed in `WorkerActorOptions`. */
export const data = (): unknown => (WorkerThreads.workerData as { data?: unknown } | null)?.data

/** An exit or error of the worker thread, reported to the supervisor as a crash. */
export class WorkerExited extends Error {
  override readonly name = "WorkerExited"
}

/**
 * The node side: handlers that forward every message to a freshly spawned worker. Runs as the
 * build of a supervised actor, so the worker lives as long as one incarnation.
 */
export const forwardingHandlers = (
  group: RpcGroup.RpcGroup<Rpc.Any>,
  options: WorkerActorOptions
): Effect.Effect<Record<string, (...args: Array<any>) => any>, unknown, ActorContext | Scope.Scope> =>
  Effect.gen(function*() {
    const actor = yield* ActorContext
    const spawn = () => {
      const thread = spawnThread(options)
      const crash = (reason: unknown) => Effect.runFork(actor.crash(Cause.die(reason)))
      thread.on("error", (error) => crash(error))
      thread.on("exit", (code) => crash(new WorkerExited(`worker thread of "${actor.name}" exited with code ${code}`)))
      return thread
    }
    const protocol = yield* Layer.build(
      RpcClient.layerProtocolWorker({ size: 1, concurrency: Number.MAX_SAFE_INTEGER }).pipe(
        Layer.provide(NodeWorker.layerPlatform(spawn))
      )
    )
    const client = yield* RpcClient.make(group, { flatten: true, disableTracing: true }).pipe(Effect.provide(protocol))
    // a broken worker is a crash of the actor (restart with a fresh one), not an error of the call
    const dieOnProtocolError = (error: unknown) => error instanceof RpcClientError
    return handlersFor(group, (tag, isStream): (...args: Array<any>) => any =>
      isStream
        ? (payload: unknown, { headers }: { headers: any }) =>
          Stream.catchAll(
            client(tag, payload as never, { headers }) as unknown as Stream.Stream<unknown, unknown>,
            (error) => (dieOnProtocolError(error) ? Stream.die(error) : Stream.fail(error))
          )
        : (payload: unknown, { headers }: { headers: any }) =>
          Effect.catchIf(
            client(tag, payload as never, { headers }) as unknown as Effect.Effect<unknown, unknown>,
            dieOnProtocolError,
            Effect.die
          ))
  })

/**
 * The worker side: serves `actor`'s protocol with `build`'s handlers until the node closes the
 * worker. Call it at the top level of the worker's entry module. Provide the services the
 * handlers need inside `build`.
 */
export const serve = <Rpcs extends Rpc.Any, Handlers extends RpcGroup.HandlersFrom<Rpcs>, EX>(
  actor: { readonly name: string; readonly protocol: RpcGroup.RpcGroup<Rpcs> },
  build: Handlers | Effect.Effect<Handlers, EX, Scope.Scope>
): void => {
  // A worker whose handlers cannot be built (a model that cannot be loaded) still serves: every
  // call dies with that failure, so callers learn what is wrong at once instead of waiting.
  const built = Effect.isEffect(build) ? build : Effect.succeed(build)
  const orFailing = Effect.catchAllCause(built as Effect.Effect<Handlers, EX, Scope.Scope>, (cause) =>
    Effect.zipRight(
      Effect.logError(`worker of actor "${actor.name}" could not start`, cause),
      Effect.succeed(failingHandlers(actor.protocol as unknown as RpcGroup.RpcGroup<Rpc.Any>, new Error(`actor "${actor.name}" could not start: ${Cause.pretty(cause)}`)) as unknown as Handlers)
    ))
  const handlers = actor.protocol.toLayer(orFailing) as unknown as Layer.Layer<Rpc.ToHandler<Rpcs>, EX>
  const server = RpcServer.layer(actor.protocol, { disableFatalDefects: true, disableTracing: true }).pipe(
    Layer.provide(handlers),
    Layer.provide(RpcServer.layerProtocolWorkerRunner),
    Layer.provide(NodeWorkerRunner.layer)
  ) as Layer.Layer<never, unknown>
  Effect.runFork(
    NodeWorkerRunner.launch(server).pipe(
      Effect.tapErrorCause((cause) => Effect.logError(`worker of actor "${actor.name}" failed`, cause))
    )
  )
}

/** Handlers for every request of `group` that die with `error` (streams too). */
const failingHandlers = (group: RpcGroup.RpcGroup<Rpc.Any>, error: Error): Record<string, () => unknown> =>
  handlersFor(group, (_tag, isStream) => (isStream ? () => Stream.die(error) : () => Effect.die(error)))
