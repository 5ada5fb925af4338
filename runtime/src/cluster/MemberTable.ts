/**
 * What one node knows of the other members, and the rules that change it: gossip merged from
 * peers, a member seen over its own connection, the failure detector's timeouts, forgetting, and
 * the index of which members run which actor. Membership.ts owns the connections and the timers
 * and calls these; every up/down change is logged and published to watchers here.
 */
import type { PeerInfo } from "./Handshake.js"
import type { DownReason, Member, MemberEvent, MemberInfo, MemberState } from "./Member.js"

export interface Entry {
  info: MemberInfo
  status: MemberState
  since: number
  /** Monotonic time (performance.now) of the last sign of life. */
  lastProgress: number
  /** Left gracefully (this incarnation): only a new incarnation brings it back. */
  left: boolean
  /** This incarnation had a connection: if it is gone, calls fail at once instead of waiting for one. */
  linked: boolean
}

/** Members not seen for this long are forgotten. */
const FORGET_AFTER_MS = 60 * 60 * 1000

export interface MemberTableOptions {
  readonly selfId: string
  readonly log: { readonly info: (message: string) => void; readonly warn: (message: string) => void }
  readonly publish: (event: MemberEvent) => void
  /** A member was marked down (after the table changed): e.g. close its connection. */
  readonly onDown: (entry: Entry, reason: DownReason) => void
}

/** A member as gossip carries it: its own description and this node's up/down judgement. */
export const toMember = (e: Entry): Member => ({ ...e.info, status: e.status, since: e.since })

/** A member as this node reports it (status, the dashboard): also when it last had news of it. */
export const toMemberView = (e: Entry): Member => ({ ...toMember(e), lastHeartbeat: Date.now() - (performance.now() - e.lastProgress) })

export const makeMemberTable = ({ log, onDown, publish, selfId }: MemberTableOptions) => {
  const members = new Map<string, Entry>()
  /** Which members run each actor, sorted by id; rebuilt on the first lookup after a change. */
  let index: Map<string, ReadonlyArray<string>> | undefined

  /** A new member (or incarnation), down until `markUp`. */
  const add = (info: MemberInfo, linked: boolean, now: number): Entry => {
    const entry: Entry = { info, status: "down", since: now, lastProgress: performance.now(), left: false, linked }
    members.set(info.id, entry)
    index = undefined
    return entry
  }

  const markUp = (e: Entry, now: number) => {
    e.status = "up"
    e.since = now
    e.lastProgress = performance.now()
    index = undefined
    log.info(`member ${e.info.id} is up (${e.info.address || "no address"}, roles: ${e.info.roles.join(",") || "none"})`)
    publish({ _tag: "MemberUp", member: toMember(e) })
  }

  const markDown = (e: Entry, reason: DownReason, now: number) => {
    if (reason === "left") e.left = true
    if (e.status === "down") return
    e.status = "down"
    e.since = now
    index = undefined
    log.warn(`member ${e.info.id} is down (${reason === "left" ? "it left" : `silent for ${Math.round((performance.now() - e.lastProgress) / 1000)} s`})`)
    publish({ _tag: "MemberDown", member: toMember(e), reason })
    onDown(e, reason)
  }

  /**
   * Gossip from `from`. Only direct evidence revives a down member: its own gossip, or a new
   * incarnation; third-hand versions never do.
   */
  const merge = (entries: ReadonlyArray<Member>, from: string) => {
    const now = Date.now()
    for (const m of entries) {
      if (m.id === selfId) continue
      const { lastHeartbeat: _seen, since: _since, status, ...info } = m
      const current = members.get(m.id)
      if (current === undefined) {
        // first news of it: trust the sender's judgement until our own clock says otherwise
        const entry = add(info, false, now)
        if (status === "up") markUp(entry, now)
        continue
      }
      const restarted = info.incarnation > current.info.incarnation
      if (!restarted && !(info.incarnation === current.info.incarnation && info.version > current.info.version)) continue
      if (current.status === "down" && !restarted && (from !== m.id || current.left)) continue
      current.info = info
      current.lastProgress = performance.now()
      index = undefined
      if (restarted) {
        current.left = false
        current.linked = false
      }
      if (current.status === "down") markUp(current, now)
    }
  }

  /** A connection from `peer` (a node) was registered: it is up, as a new member or incarnation if so. */
  const connected = (peer: PeerInfo) => {
    const now = Date.now()
    const entry = members.get(peer.id)
    if (entry === undefined || peer.incarnation > entry.info.incarnation) {
      const info = { id: peer.id, address: peer.address, roles: peer.roles, actors: [], incarnation: peer.incarnation, version: -1 }
      markUp(add(info, true, now), now)
    } else {
      entry.linked = true
      if (peer.incarnation === entry.info.incarnation && entry.status === "down" && !entry.left) markUp(entry, now)
    }
  }

  /** The failure detector's look: up members silent for `downAfterMs` go down; long-down ones are forgotten. */
  const check = (downAfterMs: number) => {
    const now = Date.now()
    for (const entry of members.values()) {
      if (entry.status === "up" && performance.now() - entry.lastProgress > downAfterMs) markDown(entry, "timeout", now)
      if (entry.status === "down" && now - entry.since > FORGET_AFTER_MS) {
        members.delete(entry.info.id)
        index = undefined
      }
    }
  }

  const actorIndex = (): ReadonlyMap<string, ReadonlyArray<string>> => {
    if (index !== undefined) return index
    const built = new Map<string, Array<string>>()
    for (const entry of [...members.values()].sort((a, b) => (a.info.id < b.info.id ? -1 : 1))) {
      for (const actor of entry.info.actors) {
        const ids = built.get(actor) ?? []
        ids.push(entry.info.id)
        built.set(actor, ids)
      }
    }
    index = built
    return built
  }

  return {
    members: members as ReadonlyMap<string, Entry>,
    markDown,
    merge,
    connected,
    check,
    actorIndex
  }
}
