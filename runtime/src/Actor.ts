/**
 * Defining actors. An actor is a name plus a protocol, an `@effect/rpc` `RpcGroup` (the shape
 * `@effect/cluster` uses for its `Entity`): `Actor.make("trainer", TrainerProtocol)`. Host it on a
 * node with `toLayer(handlers)` (or `toWorkerLayer` to run it in a worker thread), call it from
 * anywhere in the cluster with `client`:
 *
 * ```ts
 * const Echo = Actor.make("echo", RpcGroup.make(Rpc.make("Say", { payload: { text: Schema.String }, success: Schema.String })))
 * const EchoLive = Echo.toLayer({ Say: ({ text }) => Effect.succeed(text) })
 * const program = Effect.gen(function*() {
 *   const echo = yield* Echo.client
 *   return yield* echo.Say({ text: "hi" }) // Effect<string, ActorError>
 * })
 * ```
 */
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import { Effect, Layer, type Scope } from "effect"
import type { ActorContext } from "./ActorContext.js"
import { type ActorRef, ActorSystem } from "./ActorSystem.js"
import type { ActorAlreadyRunning } from "./errors.js"
import * as Supervisor from "./Supervisor.js"
import * as Worker from "./Worker.js"

export interface ActorOptions {
  /**
   * The name to register under; defaults to the actor's name. A function gets the node id, for
   * one actor per node (`(node) => \`rollout/${node}\``).
   */
  readonly name?: string | ((node: string) => string)
  /** When and how fast to restart after a crash (default `Supervisor.defaultPolicy`). */
  readonly restart?: Supervisor.RestartPolicy
  /**
   * How many calls the actor serves at once (default "unbounded"). `1` gives classic mailbox
   * semantics: one message at a time, in arrival order.
   */
  readonly concurrency?: number | "unbounded"
}

export interface Actor<Name extends string, Rpcs extends Rpc.Any> {
  readonly name: Name
  readonly protocol: RpcGroup.RpcGroup<Rpcs>

  /** Type the handlers against the protocol (for handlers written apart from `toLayer`). */
  of<Handlers extends RpcGroup.HandlersFrom<Rpcs>>(handlers: Handlers): Handlers

  /**
   * Runs the actor on this node under supervision for the lifetime of the layer. `build` runs on
   * every (re)start and may keep state (a `Ref`, a model...) for the handlers it returns; it gets
   * an `ActorContext` and a `Scope` that lives as long as this incarnation.
   */
  toLayer<Handlers extends RpcGroup.HandlersFrom<Rpcs>, EX = never, RX = never>(
    build: Handlers | Effect.Effect<Handlers, EX, RX>,
    options?: ActorOptions
  ): Layer.Layer<
    never,
    ActorAlreadyRunning,
    ActorSystem | Exclude<RX, Scope.Scope | ActorContext> | RpcGroup.HandlersContext<Rpcs, Handlers>
  >

  /**
   * Like `toLayer`, for the current scope, returning a ref to it. Spawned from an actor's build,
   * it is that actor's child: it stops when its parent restarts or stops.
   */
  spawn<Handlers extends RpcGroup.HandlersFrom<Rpcs>, EX = never, RX = never>(
    build: Handlers | Effect.Effect<Handlers, EX, RX>,
    options?: ActorOptions
  ): Effect.Effect<
    ActorRef<Rpcs>,
    ActorAlreadyRunning,
    ActorSystem | Scope.Scope | Exclude<RX, Scope.Scope | ActorContext> | RpcGroup.HandlersContext<Rpcs, Handlers>
  >

  /**
   * Runs the actor in a worker thread of this node: `entry` is a module (TypeScript is fine) that
   * calls `Worker.serve(actor, handlers)`. Supervised like any actor: a crash or an exit of the
   * worker restarts it in a fresh worker.
   */
  toWorkerLayer(options: Worker.WorkerActorOptions): Layer.Layer<never, ActorAlreadyRunning, ActorSystem>

  /** A ref to the actor registered under the actor's name, wherever it runs. */
  readonly client: Effect.Effect<ActorRef<Rpcs>, never, ActorSystem>

  /** A ref to the instance registered as `name` (default: the actor's name), optionally on one node. */
  ref(name?: string, options?: { readonly node?: string | undefined }): Effect.Effect<ActorRef<Rpcs>, never, ActorSystem>
}

/** Defines an actor: a name and the `RpcGroup` it answers. */
export const make = <const Name extends string, Rpcs extends Rpc.Any>(
  name: Name,
  protocol: RpcGroup.RpcGroup<Rpcs>
): Actor<Name, Rpcs> => {
  const spawnWith = (build: unknown, options: ActorOptions | undefined) =>
    Effect.flatMap(ActorSystem, (system) =>
      system.spawn({
        name: typeof options?.name === "function" ? options.name(system.node) : options?.name ?? name,
        group: protocol as unknown as RpcGroup.RpcGroup<Rpc.Any>,
        build: (Effect.isEffect(build) ? build : Effect.succeed(build)) as Effect.Effect<Record<string, any>, unknown, any>,
        restartPolicy: options?.restart ?? Supervisor.defaultPolicy,
        concurrency: options?.concurrency ?? "unbounded"
      }))

  const actor: Actor<Name, Rpcs> = {
    name,
    protocol,
    of: (handlers) => handlers,
    toLayer: (build, options) => Layer.scopedDiscard(spawnWith(build, options)) as any,
    spawn: (build, options) =>
      Effect.flatMap(spawnWith(build, options), (host) =>
        Effect.flatMap(ActorSystem, (system) => system.ref(protocol, host.name, { node: system.node }))) as any,
    toWorkerLayer: (options) =>
      Layer.scopedDiscard(
        spawnWith(Worker.forwardingHandlers(protocol as unknown as RpcGroup.RpcGroup<Rpc.Any>, options), {
          name: options.name,
          restart: options.restart
        })
      ),
    client: Effect.flatMap(ActorSystem, (system) => system.ref(protocol, name)),
    ref: (refName, options) => Effect.flatMap(ActorSystem, (system) => system.ref(protocol, refName ?? name, options))
  }
  return actor
}
