/**
 * Who is in the cluster, who is alive, and the one connection to each of them.
 *
 * - Joining: a node dials its `--join` addresses until one answers; the member lists it then
 *   receives name everyone else.
 * - Gossip as heartbeat: every `heartbeat` each node bumps its own version and sends its whole
 *   member table to every peer. A member whose version has not grown for `downAfter` is marked
 *   `down` (a node that leaves says so and is down at once); its connection is closed so calls
 *   pending on it fail fast. Watchers get `MemberUp`/`MemberDown` events.
 * - Only direct evidence revives a down member: its own gossip over its own connection, or a new
 *   incarnation (a restarted process). Third-hand versions never do, so a dead node does not
 *   flap back to `up` because some peer saw one more heartbeat than we did.
 * - Full mesh: of two nodes, the one with the smaller id dials (so a pair never races to open two
 *   connections); if two exist anyway, both sides keep the same one.
 * - Clients (`reins status`, scripts) dial every member, are never members, and never gossip.
 *
 * The member table and the rules above that change it are in MemberTable.ts; this file owns the
 * connections, the timers and locating actors.
 */
import { Deferred, Duration, Effect, Either, Exit, FiberId, PubSub, type Redacted, Runtime, Schedule, Schema, Stream } from "effect"
import type { ActorSystemInternal, Locator } from "../ActorSystem.js"
import { type ActorError, ActorNotFound, ActorUnavailable, type ClusterConnectError } from "../errors.js"
import type { PeerInfo } from "./Handshake.js"
import { Member, type MemberEvent, type MemberInfo } from "./Member.js"
import { makeMemberTable, toMember, toMemberView } from "./MemberTable.js"
import * as Remote from "./Remote.js"
import * as Transport from "./Transport.js"
import { Kind } from "./Wire.js"

export interface MembershipOptions {
  /** This process: `kind` says whether it is a node or a client, `maxFrameBytes` the largest frame it accepts. */
  readonly self: PeerInfo & { readonly maxFrameBytes: number }
  readonly secret: Redacted.Redacted<string>
  readonly join: ReadonlyArray<string>
  /** A member silent for this long is marked down (gossip, the heartbeat, goes out four times as often). */
  readonly downAfter: Duration.Duration
  readonly system: ActorSystemInternal
}

interface Link {
  readonly connection: Transport.Connection
  readonly remote: ReturnType<typeof Remote.make>
}

/** How often gossip (the heartbeat) goes out: a quarter of `downAfter`, at most every second. */
export const heartbeatEveryMs = (downAfterMs: number) => Math.min(1_000, downAfterMs / 4)

/**
 * How often the failure detector looks (every tick; gossip goes out every 4th): a quarter of the
 * heartbeat, at least 50 ms. A member silent for `downAfter` is down at the first look after it.
 */
export const checkEveryMs = (heartbeatMs: number) => Math.max(50, Math.floor(heartbeatMs / 4))

const decodeGossip = Schema.decodeUnknownEither(Schema.Array(Member))

export const make = (options: MembershipOptions) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const run = (effect: Effect.Effect<void>) => void runFork(effect)
    const log = {
      info: (message: string) => run(Effect.logInfo(message)),
      warn: (message: string) => run(Effect.logWarning(message))
    }
    const { system } = options
    const self = { ...options.self }
    const selfId = self.id
    const downAfterMs = Duration.toMillis(options.downAfter)
    const heartbeatMs = heartbeatEveryMs(downAfterMs)

    const links = new Map<string, Link>()
    const clientLinks = new Set<Link>()
    const dialing = new Set<string>()
    /** Calls waiting for a connection being opened to a member: done when it opens or fails. */
    const linkWaits = new Map<string, Deferred.Deferred<Link, void>>()
    const notifyLink = (id: string, link: Link | undefined) => {
      const wait = linkWaits.get(id)
      if (wait === undefined) return
      linkWaits.delete(id)
      Deferred.unsafeDone(wait, link ? Exit.succeed(link) : Exit.fail(undefined))
    }
    const nextDial = new Map<string, number>()
    let version = 0
    let leaving = false
    let joinedOnce = false
    /**
     * Until a dial to a `--join` address has succeeded, the node keeps dialing them even if other
     * nodes have connected to it meanwhile: a node that joined *us* while our seed was still
     * starting does not know the seed's side of the cluster, and without this the two halves
     * would never meet.
     */
    let reachedSeed = false
    const events = yield* PubSub.unbounded<MemberEvent>()

    const selfInfo = (): MemberInfo => ({
      id: selfId,
      address: self.address,
      roles: self.roles,
      actors: system
        .localActors()
        .filter((a) => !a.system && a.status !== "stopped")
        .map((a) => a.name)
        .sort(),
      incarnation: self.incarnation,
      version
    })

    const table = makeMemberTable({
      selfId,
      log,
      publish: (event) => run(PubSub.publish(events, event)),
      onDown: (e, reason) => {
        // Calls pending on a member that stopped answering fail fast.
        const link = links.get(e.info.id)
        if (link && reason === "timeout") link.connection.close(4000, "marked down: no heartbeat")
      }
    })
    const members = table.members

    // ---- gossip ------------------------------------------------------------------------------

    const gossipFrame = () => [Kind.Gossip, [{ ...selfInfo(), status: "up", since: 0 }, ...[...members.values()].map(toMember)]]

    /** A heartbeat or a change of the local actors: a new version, sent to every peer. */
    const gossip = () => {
      version++
      if (self.kind === "client" || leaving) return
      const frame = gossipFrame()
      for (const link of links.values()) link.connection.send(frame)
      for (const link of clientLinks) link.connection.send(frame)
    }

    // ---- connections -------------------------------------------------------------------------

    const setupLink = (connection: Transport.Connection): Link => {
      const remote = Remote.make(connection, { self: selfId, local: (name) => system.local(name), runtime })
      const link: Link = { connection, remote }
      const peer = connection.peer
      connection.listen({
        onFrame: (frame) => {
          if (remote.onFrame(frame)) return
          switch (frame[0]) {
            case Kind.Gossip: {
              if (peer.kind === "client") throw new Error("clients do not gossip")
              const decoded = decodeGossip(frame[1])
              if (Either.isLeft(decoded)) throw new Error("malformed gossip")
              return table.merge(decoded.right, peer.id)
            }
            case Kind.Leave: {
              const entry = members.get(peer.id)
              if (entry && entry.info.incarnation === peer.incarnation) table.markDown(entry, "left", Date.now())
              return
            }
            default:
              throw new Error(`unexpected frame kind ${String(frame[0])}`)
          }
        },
        onClose: (code, reason) => {
          remote.onClose(members.get(peer.id)?.status === "down" ? "node-down" : "disconnected")
          clientLinks.delete(link)
          if (links.get(peer.id) === link) {
            links.delete(peer.id)
            nextDial.delete(peer.id) // redial at the next tick if it is still up
            if (!leaving && peer.kind === "node") log.info(`connection to ${peer.id} closed (${code}${reason ? ` ${reason}` : ""})`)
          }
        }
      })
      return link
    }

    /** Of two connections to the same peer, both sides keep the one the smaller id dialed. */
    const designated = (connection: Transport.Connection) => {
      const dialer = connection.dialed ? selfId : connection.peer.id
      return dialer === (selfId < connection.peer.id ? selfId : connection.peer.id)
    }

    const register = (connection: Transport.Connection) => {
      const peer = connection.peer
      if (leaving) return connection.close(1001, "node shutting down")
      if (peer.id === selfId && peer.incarnation === self.incarnation) {
        log.warn(`${connection.remote} is this node itself; ignoring that join address`)
        return connection.close(4008, "connected to itself")
      }
      if (peer.kind === "client") {
        if (self.kind === "client") return connection.close(4003, "clients do not talk to clients")
        clientLinks.add(setupLink(connection))
        connection.send(gossipFrame())
        return
      }
      if (peer.id === selfId) {
        log.warn(`node ${connection.remote} uses this node's id ${selfId}: give each node its own --data directory`)
        return connection.close(4009, "duplicate node id")
      }
      const existing = links.get(peer.id)
      if (existing && existing.connection.isOpen()) {
        const old = existing.connection.peer
        const keepNew = peer.incarnation > old.incarnation ||
          (peer.incarnation === old.incarnation && (designated(connection) || !designated(existing.connection)))
        if (!keepNew) return connection.close(4010, "duplicate connection")
        links.delete(peer.id)
        existing.connection.close(4010, "replaced by a newer connection")
      }
      const link = setupLink(connection)
      links.set(peer.id, link)
      joinedOnce = true
      notifyLink(peer.id, link)
      table.connected(peer)
      if (self.kind === "node") connection.send(gossipFrame())
    }

    const dialAndRegister = (url: string) =>
      Transport.dial(url, { secret: options.secret, self, maxFrameBytes: self.maxFrameBytes, logs: log }).pipe(
        Effect.tap((connection) => Effect.sync(() => register(connection)))
      )

    const dial = (url: string, key: string, quiet: boolean) => {
      dialing.add(key)
      runFork(
        dialAndRegister(url).pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              if (options.join.includes(key)) reachedSeed = true
            })
          ),
          Effect.catchAll((error) => {
            notifyLink(key, undefined)
            return quiet ? Effect.logDebug(error.message) : Effect.logWarning(error.message)
          }),
          Effect.ensuring(Effect.sync(() => dialing.delete(key)))
        )
      )
    }

    const tick = (heartbeat: boolean) => {
      if (leaving) return
      table.check(downAfterMs)
      const now = Date.now()
      for (const [id, entry] of members) {
        if (links.has(id) || dialing.has(id) || entry.info.address === "") continue
        if (self.kind === "node" && !(selfId < id)) continue
        if (now < (nextDial.get(id) ?? 0)) continue
        nextDial.set(id, now + (entry.status === "up" ? heartbeatMs : 5 * heartbeatMs))
        dial(entry.info.address, id, entry.status === "down")
      }
      if (links.size === 0 || !reachedSeed) {
        for (const url of options.join) {
          if (dialing.has(url) || now < (nextDial.get(url) ?? 0)) continue
          nextDial.set(url, now + 2 * heartbeatMs)
          dial(url, url, joinedOnce)
        }
      }
      if (heartbeat) gossip()
    }

    system.onLocalChange(gossip)

    // ---- locating actors ---------------------------------------------------------------------

    /** Calls to an up member we have no connection to yet wait this long for one. */
    const CONNECT_WAIT = Duration.seconds(3)

    const waitForLink = (id: string, actor: string): Effect.Effect<Remote.Channel, ActorError> => {
      // clients always dial; of two nodes the smaller id dials (the other one is on its way)
      if ((self.kind === "client" || selfId < id) && !dialing.has(id)) {
        const address = members.get(id)?.info.address
        if (address) {
          nextDial.set(id, Date.now() + heartbeatMs)
          dial(address, id, false)
        }
      }
      const wait = linkWaits.get(id) ?? Deferred.unsafeMake<Link, void>(FiberId.none)
      linkWaits.set(id, wait)
      // a failed dial and no connection in time look the same to the caller
      return Deferred.await(wait).pipe(
        Effect.timeout(CONNECT_WAIT),
        Effect.mapBoth({
          onFailure: () => new ActorUnavailable({ actor, node: id, reason: "disconnected" }),
          onSuccess: (link) => link.remote.channel
        })
      )
    }

    const locate: Locator["locate"] = (name, pin): Effect.Effect<Remote.Channel, ActorError> => {
      if (pin !== undefined) {
        const entry = members.get(pin)
        const link = links.get(pin)
        if (entry?.status === "down") return Effect.fail(new ActorUnavailable({ actor: name, node: pin, reason: "node-down" }))
        if (link) return Effect.succeed(link.remote.channel)
        if (!entry) return Effect.fail(new ActorNotFound({ actor: name, node: pin }))
        if (entry.linked) return Effect.fail(new ActorUnavailable({ actor: name, node: pin, reason: "disconnected" }))
        return waitForLink(pin, name)
      }
      const nodes = table.actorIndex().get(name)
      if (nodes === undefined) return Effect.fail(new ActorNotFound({ actor: name }))
      let connecting: string | undefined
      let dropped: string | undefined
      for (const id of nodes) {
        const entry = members.get(id)!
        if (entry.status !== "up") continue
        const link = links.get(id)
        if (link) return Effect.succeed(link.remote.channel)
        if (entry.linked) dropped ??= id
        else connecting ??= id
      }
      if (connecting !== undefined) return waitForLink(connecting, name)
      if (dropped !== undefined) return Effect.fail(new ActorUnavailable({ actor: name, node: dropped, reason: "disconnected" }))
      return Effect.fail(new ActorUnavailable({ actor: name, node: nodes[0]!, reason: "node-down" }))
    }

    const locator: Locator = {
      locate,
      members: Effect.sync((): ReadonlyArray<Member> => {
        const list = [...members.values()].map(toMemberView)
        if (self.kind === "node") list.push({ ...selfInfo(), status: "up", since: self.incarnation, lastHeartbeat: Date.now() })
        return list.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      }),
      events: Stream.fromPubSub(events)
    }
    system.attach(locator)

    /** Starts heartbeats, failure detection and joining. */
    const start = (address: string) =>
      Effect.gen(function*() {
        self.address = address
        let n = 0
        yield* Effect.sync(() => tick(n++ % 4 === 0)).pipe(
          Effect.catchAllDefect((defect) => Effect.logError("membership tick failed", defect)),
          Effect.repeat(Schedule.spaced(Duration.millis(checkEveryMs(heartbeatMs)))),
          Effect.forkScoped
        )
      })

    /** Tells every peer this node leaves, then closes the connections. */
    const leave = Effect.sync(() => {
      if (leaving) return
      for (const link of links.values()) link.connection.send([Kind.Leave])
      leaving = true
    })

    const closeAll = Effect.sync(() => {
      leaving = true
      for (const link of [...links.values(), ...clientLinks]) link.connection.close(1001, "node shutting down")
    })

    /** Client mode: dials `url` once and waits for its first member list. */
    const connectTo = (url: string): Effect.Effect<PeerInfo, ClusterConnectError> =>
      Effect.map(dialAndRegister(url), (connection) => connection.peer)

    return {
      self: () => ({ ...self }),
      /** Logs from plain callbacks (sockets, timers) with the services `make` ran with. */
      log,
      onConnection: register,
      locator,
      start,
      leave,
      closeAll,
      connectTo
    }
  })

export type Membership = Effect.Effect.Success<ReturnType<typeof make>>
