/**
 * One actor instance on this node: its supervised incarnations and the callers connected to it.
 *
 * Each incarnation is an `RpcServer.makeNoSerialization` over the handlers its build produced,
 * so requests reach the handler as values (no serialization); who the caller is — an `ActorRef`
 * in this thread or a remote connection — is just a `clientId` with a `deliver` function. The
 * host turns what the runtime adds (a handler defect, a call cut short by a restart) into tagged
 * errors before delivering, so one crashing actor never crashes its callers.
 */
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import type { FromClient, FromServer, RequestId } from "@effect/rpc/RpcMessage"
import * as RpcSchema from "@effect/rpc/RpcSchema"
import * as RpcServer from "@effect/rpc/RpcServer"
import { Cause, Context, Deferred, Effect, Exit, FiberId, FiberRef, Option, Scope, Stream } from "effect"
import { ActorContext } from "./ActorContext.js"
import { ActorDefect, ActorUnavailable, type UnavailableReason, UnknownMessage } from "./errors.js"
import * as Supervisor from "./Supervisor.js"

export type HostStatus = "starting" | "running" | "restarting" | "stopped"

/** What an actor's build returns: a handler per message tag. */
export type Handlers = Record<string, (...args: Array<any>) => any>

/** Where a host sends the responses meant for one caller. */
export type Deliver = (message: FromServer<any>) => Effect.Effect<void>

export interface ActorHost {
  readonly name: string
  readonly group: RpcGroup.RpcGroup<Rpc.Any>
  /** System actors (the node's own) are not listed among a node's actors. */
  readonly system: boolean
  readonly status: () => HostStatus
  readonly restarts: () => number
  /** Resolves once the actor first runs (or is stopped without ever running). */
  readonly started: Effect.Effect<void>
  /** A new caller: returns the id to `write` with. */
  readonly connect: (deliver: Deliver) => number
  /** The caller went away: its calls in flight are interrupted. */
  readonly disconnect: (clientId: number) => Effect.Effect<void>
  readonly write: (clientId: number, message: FromClient<any>) => Effect.Effect<void>
}

/** An actor to register on a node (`ActorSystem.spawn`). */
export interface SpawnOptions {
  readonly name: string
  readonly group: RpcGroup.RpcGroup<Rpc.Any>
  /** Builds the handlers of one incarnation (runs again on every restart). */
  readonly build: Effect.Effect<Handlers, unknown, any>
  readonly restartPolicy: Supervisor.RestartPolicy
  readonly concurrency: number | "unbounded"
  /** Node-internal actors are not listed among the node's actors. */
  readonly system?: boolean
}

export interface HostOptions extends SpawnOptions {
  readonly node: string
  /** The services the build and the handlers run with. */
  readonly context: Context.Context<never>
  /** True once the node is shutting down: calls cut short say so. */
  readonly shuttingDown: () => boolean
}

interface Running {
  readonly server: RpcServer.RpcServer<Rpc.Any>
  readonly context: Context.Context<never>
  readonly handled: ReadonlySet<string>
}

const describe = (cause: Cause.Cause<unknown>): string => {
  const squashed = Cause.squash(cause)
  return squashed instanceof Error ? `${squashed.name}: ${squashed.message}` : String(squashed)
}

/** Handlers that throw instead of returning an Effect would kill every call of the caller. */
const guard = (handler: (...args: Array<any>) => any, isStream: boolean) => (...args: Array<any>) => {
  try {
    return handler(...args)
  } catch (defect) {
    return isStream ? Stream.die(defect) : Effect.die(defect)
  }
}

const handlersContext = (
  group: RpcGroup.RpcGroup<Rpc.Any>,
  handlers: Handlers,
  context: Context.Context<never>
) => {
  const entries = new Map<string, unknown>()
  const handled = new Set<string>()
  for (const [tag, handler] of Object.entries(handlers)) {
    const rpc = group.requests.get(tag) as Rpc.AnyWithProps | undefined
    if (rpc === undefined || typeof handler !== "function") continue
    entries.set(rpc.key, { handler: guard(handler, RpcSchema.isStreamSchema(rpc.successSchema)), context })
    handled.add(tag)
  }
  return { context: Context.unsafeMake(entries) as Context.Context<never>, handled }
}

/** Creates the host and the supervised fiber body that runs it (fork it in the registration scope). */
export const make = (options: HostOptions): { readonly host: ActorHost; readonly run: Effect.Effect<void> } => {
  const { name, group } = options
  const clients = new Map<number, Deliver>()
  let nextClientId = 0
  let status: HostStatus = "starting"
  let restarts = 0
  let running: Running | undefined
  const started = Deferred.unsafeMake<void>(FiberId.none)

  const unavailableReason = (): UnavailableReason =>
    options.shuttingDown() ? "shutting-down" : status === "running" ? "restarting" : status

  const unavailable = () => new ActorUnavailable({ actor: name, node: options.node, reason: unavailableReason() })

  const deliverTo = (clientId: number, requestId: RequestId, error: unknown) => {
    const deliver = clients.get(clientId)
    return deliver ? deliver({ _tag: "Exit", clientId, requestId, exit: Exit.fail(error) }) : Effect.void
  }

  const makeIncarnation = (incarnation: number): Effect.Effect<Supervisor.Incarnation, unknown> =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const crashed = yield* Deferred.make<Cause.Cause<unknown>>()
      const crash = (cause: Cause.Cause<unknown>) => Deferred.succeed(crashed, cause).pipe(Effect.asVoid)

      // A reply carrying a defect crashes the actor; the caller gets a tagged error instead.
      const translate = (message: FromServer<any>): FromServer<any> => {
        if (message._tag === "Defect") {
          Deferred.unsafeDone(crashed, Exit.succeed(Cause.die(message.defect)))
          return message
        }
        if (message._tag !== "Exit" || message.exit._tag === "Success") return message
        const cause = message.exit.cause
        if (Cause.isDie(cause)) {
          Deferred.unsafeDone(crashed, Exit.succeed(cause))
          return { ...message, exit: Exit.fail(new ActorDefect({ actor: name, defect: describe(cause) })) }
        }
        if (Cause.isInterruptedOnly(cause)) return { ...message, exit: Exit.fail(unavailable()) }
        return message
      }

      const actorContext = ActorContext.of({
        name,
        node: options.node,
        incarnation,
        crash,
        fork: (effect) =>
          effect.pipe(
            Effect.catchAllCause((cause) => (Cause.isInterruptedOnly(cause) ? Effect.void : crash(cause))),
            Effect.forkIn(scope),
            Effect.asVoid
          )
      })
      const context = options.context.pipe(Context.add(ActorContext, actorContext), Context.add(Scope.Scope, scope))

      const start = Effect.gen(function*() {
        const handlers = yield* (Effect.provide(options.build, context) as Effect.Effect<Handlers, unknown>)
        const built = handlersContext(group, handlers, context)
        const server = yield* RpcServer.makeNoSerialization(group, {
          disableTracing: true,
          disableFatalDefects: true,
          concurrency: options.concurrency,
          onFromServer: (message) => {
            const deliver = clients.get(message.clientId)
            return deliver === undefined || message._tag === "ClientEnd" ? Effect.void : deliver(translate(message))
          }
        }).pipe(Effect.provide(Context.merge(context, built.context)), Scope.extend(scope)) as Effect.Effect<
          RpcServer.RpcServer<Rpc.Any>
        >
        running = { server, context, handled: built.handled }
        status = "running"
        Deferred.unsafeDone(started, Exit.void)
      })

      yield* start.pipe(
        // a crash while starting (a worker that exits at once...) fails the start
        Effect.raceFirst(Effect.flatMap(Deferred.await(crashed), Effect.failCause)),
        Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
      )
      return {
        crashed: Deferred.await(crashed),
        close: Effect.suspend(() => {
          running = undefined
          return Scope.close(scope, Exit.void)
        })
      }
    })

  const run = Supervisor.supervise({
    name,
    restartPolicy: options.restartPolicy,
    start: Effect.suspend(() => makeIncarnation(restarts)),
    onCrash: (decision, count) =>
      Effect.sync(() => {
        status = Option.isSome(decision) ? "restarting" : "stopped"
        restarts = count + (Option.isSome(decision) ? 1 : 0)
      }),
    onStop: Effect.sync(() => {
      status = "stopped"
    })
  }).pipe(
    Effect.ensuring(
      Effect.sync(() => {
        running = undefined
        status = "stopped"
        Deferred.unsafeDone(started, Exit.void)
      })
    )
  )

  const host: ActorHost = {
    name,
    group,
    system: options.system ?? false,
    status: () => status,
    restarts: () => restarts,
    started: Deferred.await(started),
    connect: (deliver) => {
      const id = nextClientId++
      clients.set(id, deliver)
      return id
    },
    disconnect: (clientId) =>
      Effect.suspend(() => {
        clients.delete(clientId)
        return running ? running.server.disconnect(clientId) : Effect.void
      }),
    write: (clientId, message) => {
      // a server being closed would answer with an interruption: say why instead
      const current = status === "running" ? running : undefined
      if (message._tag === "Request") {
        if (current === undefined) return deliverTo(clientId, message.id, unavailable())
        if (!current.handled.has(message.tag)) {
          return deliverTo(clientId, message.id, new UnknownMessage({ actor: name, tag: message.tag }))
        }
      } else if (current === undefined) {
        return Effect.void
      }
      // The handler runs with the actor's services, never the caller's.
      return Effect.locally(current.server.write(clientId, message), FiberRef.currentContext, current.context)
    }
  }
  return { host, run }
}
