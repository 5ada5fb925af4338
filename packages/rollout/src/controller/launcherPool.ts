/**
 * The controller's launcher pool: the launcher actors of the cluster it may place attempts on,
 * kept in line with membership. A launcher is discovered in the background (its capacity, then
 * what it adopted from earlier incarnations) and joins the pool only after that report was
 * handled, so nothing new is placed on it before the attempts it follows are joined. A launcher
 * whose node goes down is lost: its `lost` signal tells the attempts placed there.
 */
import { type AdoptedAttempts, LAUNCHER_ACTOR_PREFIX, LauncherCapacity } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Deferred, Effect, Option, type Scope } from "effect"
import { LauncherActor } from "./launcherActor.js"

export interface LauncherSlot {
  readonly name: string
  readonly node: string
  readonly ref: Effect.Effect.Success<ReturnType<typeof LauncherActor.ref>>
  readonly kind: string
  max: number
  inflight: number
  /** Completed when the launcher's node goes down: its attempts are lost. */
  readonly lost: Deferred.Deferred<void>
  /** Kubernetes: what its node's shutdown does to its Jobs (see `LauncherCapacity.onStop`). */
  readonly onStop: "delete" | "leave" | undefined
  /** Its node said it leaves (a shutdown, not a crash): with `onStop: "delete"` its Jobs are being deleted. */
  leftGracefully: boolean
}

/** Handles what a newly discovered launcher adopted, before it joins the pool. */
export type OnAdopted = (slot: LauncherSlot, adopted: AdoptedAttempts) => Effect.Effect<void>

const freePlaces = (slot: LauncherSlot) => slot.max - slot.inflight

export type LauncherPool = Effect.Effect.Success<ReturnType<typeof makeLauncherPool>>

export const makeLauncherPool = (scope: Scope.Scope, wake: Effect.Effect<void>) =>
  Effect.map(ActorSystem, (system) => {
    const slots = new Map<string, LauncherSlot>()
    /** Launchers being discovered in the background. */
    const discovering = new Set<string>()

    const drop = (slot: LauncherSlot) =>
      Effect.suspend(() => {
        if (slots.get(slot.name) === slot) slots.delete(slot.name)
        return Deferred.succeed(slot.lost, undefined)
      })

    /** A new launcher: its capacity, then what it adopted from earlier incarnations (see `OnAdopted`). */
    const discover = (name: string, node: string, onAdopted: OnAdopted) =>
      Effect.gen(function*() {
        const ref = yield* Effect.provideService(LauncherActor.ref(name, { node }), ActorSystem, system)
        const capacity = yield* ref.Capacity().pipe(Effect.timeout("3 seconds"), Effect.option)
        if (capacity._tag === "None" || slots.has(name)) return false
        const adopted = yield* ref.Adopt().pipe(
          Effect.timeout("30 seconds"),
          Effect.tapError((e) => Effect.logWarning(`controller: launcher ${name} did not report what it adopted: ${e.message}`)),
          Effect.option
        )
        if (slots.has(name)) return false
        const { kind, max, onStop } = capacity.value
        const slot: LauncherSlot = { name, node, ref, kind, max, inflight: 0, lost: yield* Deferred.make<void>(), onStop, leftGracefully: false }
        if (Option.isSome(adopted)) yield* onAdopted(slot, adopted.value)
        slots.set(name, slot)
        return true
      }).pipe(Effect.ensuring(Effect.sync(() => discovering.delete(name))))

    /** Brings the pool in line with membership: new launchers are discovered, gone ones are lost. */
    const refresh = (onAdopted: OnAdopted): Effect.Effect<void> =>
      Effect.gen(function*() {
        const members = yield* system.members
        const seen = new Set<string>()
        for (const m of members) {
          if (m.status !== "up") continue
          for (const actor of m.actors) {
            if (!actor.startsWith(LAUNCHER_ACTOR_PREFIX)) continue
            seen.add(actor)
            if (slots.has(actor) || discovering.has(actor)) continue
            // in the background: a slow launcher (a Kubernetes listing to adopt) must not hold up
            // scheduling. A new launcher wakes the scheduler; one that does not answer is asked
            // again at the next periodic pass (waking here would spin while it stays unreachable).
            discovering.add(actor)
            yield* Effect.forkIn(Effect.flatMap(discover(actor, m.id, onAdopted), (added) => (added ? wake : Effect.void)), scope)
          }
        }
        for (const slot of [...slots.values()]) {
          const member = members.find((m) => m.id === slot.node)
          // a member that went down is dropped by its MemberDown event, which says whether it left
          // (a shutdown) or crashed; here only members that are gone altogether
          if (member === undefined) yield* drop(slot)
          else if (member.status !== "up") continue
          // the actor stopped on a live node: its calls fail by themselves; place nothing more there
          else if (!seen.has(slot.name)) slots.delete(slot.name)
        }
      })

    /** The launchers of a node that went down (`graceful`: it said it leaves) are lost. */
    const memberDown = (node: string, graceful: boolean): Effect.Effect<void> =>
      Effect.forEach(
        [...slots.values()].filter((slot) => slot.node === node),
        (slot) =>
          Effect.suspend(() => {
            slot.leftGracefully = graceful
            return drop(slot)
          }),
        { discard: true }
      )

    /** The accepted launcher with the most free places (possibly none free), null when none is accepted. */
    const freest = (accept: (slot: LauncherSlot) => boolean) =>
      [...slots.values()].filter(accept).reduce<LauncherSlot | null>((best, slot) => (best === null || freePlaces(slot) > freePlaces(best) ? slot : best), null)

    return {
      refresh,
      memberDown,
      /** Places nothing more on `slot` until it is discovered again (its calls broke). */
      forget: (slot: LauncherSlot) => void (slots.get(slot.name) === slot && slots.delete(slot.name)),
      /** Whether `slot` is still the pool's launcher of its name. */
      holds: (slot: LauncherSlot) => slots.get(slot.name) === slot,
      freest,
      capacities: () => [...slots.values()].map((s) => new LauncherCapacity({ node: s.node, kind: s.kind, max: s.max, running: s.inflight }))
    }
  })
