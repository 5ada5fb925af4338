/**
 * The actors of this process and the way to reach any actor of the cluster.
 *
 * An `ActorRef` is an ordinary `RpcClient` (made with `RpcClient.makeNoSerialization`) whose
 * outgoing messages are routed per call: to the `ActorHost` in this thread when the actor runs
 * here (values pass by reference, nothing is serialized), otherwise to the channel of the node
 * that runs it (see Remote.ts). Routing asks the `Locator` (membership) at every call, so a ref
 * stays valid while actors move, restart or their node comes back.
 */
import * as RpcClient from "@effect/rpc/RpcClient"
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import type { FromServer, Request, RequestId } from "@effect/rpc/RpcMessage"
import { Context, Effect, Layer, Scope, Stream } from "effect"
import { type ActorError, ActorAlreadyRunning, ActorNotFound } from "./errors.js"
import * as Host from "./Host.js"
import type { Member, MemberEvent } from "./cluster/Member.js"
import type { Channel } from "./cluster/Remote.js"

/** A location-transparent handle on an actor: call its messages like methods. */
export type ActorRef<Rpcs extends Rpc.Any> = RpcClient.RpcClient<Rpcs, ActorError>

/** Where remote actors are (implemented by membership). */
export interface Locator {
  /** The channel to the node running `name` (waits briefly for a connection being opened). */
  readonly locate: (name: string, node: string | undefined) => Effect.Effect<Channel, ActorError>
  readonly members: Effect.Effect<ReadonlyArray<Member>>
  readonly events: Stream.Stream<MemberEvent>
}

export interface LocalActor {
  readonly name: string
  readonly status: Host.HostStatus
  readonly restarts: number
  readonly system: boolean
}

export interface ActorSystemService {
  /** The id of this node ("local" for a process without a node). */
  readonly node: string
  /**
   * Registers an actor on this node under supervision, for the lifetime of the current scope;
   * waits until it first runs (or was stopped trying).
   */
  readonly spawn: (options: Host.SpawnOptions) => Effect.Effect<Host.ActorHost, ActorAlreadyRunning, Scope.Scope>
  /** A ref to the actor registered as `name` (anywhere, or on `options.node` only). */
  readonly ref: <Rpcs extends Rpc.Any>(
    group: RpcGroup.RpcGroup<Rpcs>,
    name: string,
    options?: { readonly node?: string | undefined }
  ) => Effect.Effect<ActorRef<Rpcs>>
  readonly local: (name: string) => Host.ActorHost | undefined
  readonly localActors: () => ReadonlyArray<LocalActor>
  /** The cluster as this node sees it (just this node without membership). */
  readonly members: Effect.Effect<ReadonlyArray<Member>>
  /** Members coming up and going down. */
  readonly events: Stream.Stream<MemberEvent>
}

export class ActorSystem extends Context.Tag("@reins/runtime/ActorSystem")<ActorSystem, ActorSystemService>() {
  /**
   * An actor system without a node: every actor runs in this process and is reached without
   * serialization. For tests, tools and single-process programs.
   */
  static readonly layerLocal = (options: { readonly node?: string } = {}): Layer.Layer<ActorSystem> =>
    Layer.scoped(
      ActorSystem,
      Effect.gen(function*() {
        const system = yield* make({ node: options.node ?? "local" })
        yield* Effect.addFinalizer(() => Effect.sync(() => system.beginShutdown()))
        return system as ActorSystemService
      })
    )
}

/** The system plus the hooks a node wires membership into. */
export interface ActorSystemInternal extends ActorSystemService {
  readonly attach: (locator: Locator) => void
  /** Called whenever the set of local actors (or their status) changes. */
  readonly onLocalChange: (listener: () => void) => void
  readonly beginShutdown: () => void
}

interface Route {
  readonly ack: (requestId: RequestId) => Effect.Effect<void>
  readonly interrupt: (requestId: RequestId) => Effect.Effect<void>
}

/**
 * `RpcClient` constructs every payload with `payloadSchema.make(payload)`, which validates it:
 * measured ~15 µs per call for a struct with a packed field (the validator is rebuilt each time),
 * more than the whole rest of a local call. Payloads are checked by their schema when they are
 * encoded for the wire and are typed locally, so the client side keeps the constructor (and its
 * defaults) but skips that validation.
 */
const withUncheckedMake = <Rpcs extends Rpc.Any>(group: RpcGroup.RpcGroup<Rpcs>): RpcGroup.RpcGroup<Rpcs> => {
  const requests = new Map<string, Rpcs>()
  for (const [tag, rpc] of group.requests) {
    const schema = (rpc as unknown as Rpc.AnyWithProps).payloadSchema as { make?: (props: unknown, options?: unknown) => unknown }
    if (typeof schema.make !== "function") {
      requests.set(tag, rpc)
      continue
    }
    const make = schema.make.bind(schema)
    const payloadSchema = Object.create(schema, { make: { value: (props: unknown) => make(props, { disableValidation: true }) } })
    requests.set(tag, Object.assign(Object.create(Object.getPrototypeOf(rpc)), rpc, { payloadSchema }))
  }
  return Object.assign(Object.create(Object.getPrototypeOf(group)), group, { requests })
}

export const make = (options: { readonly node: string }): Effect.Effect<ActorSystemInternal, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const node = options.node
    const locals = new Map<string, Host.ActorHost>()
    const listeners = new Set<() => void>()
    const changed = () => {
      for (const listener of listeners) listener()
    }
    let locator: Locator | undefined
    let shuttingDown = false

    const localActors = () =>
      [...locals.values()].map((h) => ({ name: h.name, status: h.status(), restarts: h.restarts(), system: h.system }))

    const selfMember = (): Member => ({
      id: node,
      address: "",
      roles: [],
      actors: localActors().filter((a) => !a.system && a.status !== "stopped").map((a) => a.name),
      incarnation: 0,
      version: 0,
      status: "up",
      since: 0,
      lastHeartbeat: Date.now()
    })

    const spawn: ActorSystemService["spawn"] = (spawnOptions) =>
      Effect.gen(function*() {
        if (locals.has(spawnOptions.name)) return yield* new ActorAlreadyRunning({ actor: spawnOptions.name, node })
        const context = yield* Effect.context<never>()
        const { host, run } = Host.make({ ...spawnOptions, node, context, shuttingDown: () => shuttingDown })
        locals.set(host.name, host)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            if (locals.get(host.name) === host) locals.delete(host.name)
            changed()
          })
        )
        yield* run.pipe(Effect.ensuring(Effect.sync(changed)), Effect.forkScoped)
        yield* host.started
        changed()
        return host
      })

    /** One RpcClient per (protocol, name, pin), routed per call. */
    const makeRef = <Rpcs extends Rpc.Any>(protocol: RpcGroup.RpcGroup<Rpcs>, name: string, pin: string | undefined) =>
      Effect.gen(function*() {
        const group = withUncheckedMake(protocol)
        const routes = new Map<RequestId, Route>()
        const localIds = new WeakMap<Host.ActorHost, number>()
        let write: (message: FromServer<Rpcs>) => Effect.Effect<void> = () => Effect.void
        const deliver = (message: FromServer<any>) => {
          if (message._tag === "Exit") routes.delete(message.requestId)
          return write(message)
        }

        const toLocal = (host: Host.ActorHost, request: Request<any>) => {
          const id = localIds.get(host) ?? host.connect(deliver)
          localIds.set(host, id)
          routes.set(request.id, {
            ack: (requestId) => host.write(id, { _tag: "Ack", requestId }),
            interrupt: (requestId) => host.write(id, { _tag: "Interrupt", requestId, interruptors: [] })
          })
          return host.write(id, request)
        }

        const toRemote = (channel: Channel, request: Request<any>) => {
          routes.set(request.id, {
            ack: (requestId) => channel.ack(name, requestId),
            interrupt: (requestId) => channel.interrupt(name, requestId)
          })
          return Effect.tapError(
            channel.request(name, group.requests.get(request.tag)!, request, deliver),
            () => Effect.sync(() => routes.delete(request.id))
          )
        }

        const route = (request: Request<any>): Effect.Effect<void, ActorError> => {
          const host = pin === undefined || pin === node ? locals.get(name) : undefined
          if (host !== undefined && host.status() !== "stopped") return toLocal(host, request)
          // pinned here, or no cluster to look in: the local host (stopped) or nothing
          if (pin === node || locator === undefined) {
            return host ? toLocal(host, request) : Effect.fail(new ActorNotFound({ actor: name, node: pin }))
          }
          return Effect.matchEffect(locator.locate(name, pin), {
            onSuccess: (channel) => toRemote(channel, request),
            // stopped here and unreachable elsewhere: the local host says why
            onFailure: (error) => (host ? toLocal(host, request) : Effect.fail(error))
          })
        }

        const client = yield* RpcClient.makeNoSerialization(group, {
          supportsAck: true,
          disableTracing: true,
          onFromClient: ({ message }): Effect.Effect<void, ActorError> => {
            switch (message._tag) {
              case "Request":
                return route(message)
              case "Ack":
                return routes.get(message.requestId)?.ack(message.requestId) ?? Effect.void
              case "Interrupt": {
                const r = routes.get(message.requestId)
                routes.delete(message.requestId)
                return r ? r.interrupt(message.requestId) : Effect.void
              }
              default:
                return Effect.void
            }
          }
        })
        write = client.write
        return client.client as unknown as ActorRef<Rpcs>
      })

    const refs = new WeakMap<object, Map<string, unknown>>()
    const ref = <Rpcs extends Rpc.Any>(
      group: RpcGroup.RpcGroup<Rpcs>,
      name: string,
      refOptions?: { readonly node?: string | undefined }
    ): Effect.Effect<ActorRef<Rpcs>> =>
      Effect.suspend(() => {
        const key = `${name}\u0000${refOptions?.node ?? ""}`
        const byName = refs.get(group) ?? new Map<string, unknown>()
        refs.set(group, byName)
        const cached = byName.get(key) as ActorRef<Rpcs> | undefined
        if (cached !== undefined) return Effect.succeed(cached)
        const created = makeRef(group, name, refOptions?.node).pipe(Scope.extend(scope)) as Effect.Effect<ActorRef<Rpcs>>
        return Effect.tap(created, (client) => Effect.sync(() => byName.set(key, client)))
      })

    const system: ActorSystemInternal = {
      node,
      spawn,
      ref,
      local: (name) => locals.get(name),
      localActors,
      members: Effect.suspend(() => (locator ? locator.members : Effect.succeed([selfMember()]))),
      events: Stream.unwrap(Effect.sync(() => (locator ? locator.events : Stream.never))),
      attach: (l) => {
        locator = l
      },
      onLocalChange: (listener) => {
        listeners.add(listener)
      },
      beginShutdown: () => {
        shuttingDown = true
      }
    }
    return system
  })
