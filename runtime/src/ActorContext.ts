/**
 * What an actor knows about itself while it runs. Provided to the effect that builds the actor's
 * handlers and to the handlers themselves; a fresh one per incarnation (restart).
 */
import { type Cause, Context, type Effect } from "effect"

export interface ActorContextService {
  /** The name the actor is registered under (e.g. `rollout/n-3fa9c2`). */
  readonly name: string
  /** The id of the node it runs on. */
  readonly node: string
  /** 0 for the first start, then 1, 2... after each restart. */
  readonly incarnation: number
  /**
   * Runs `effect` for as long as this incarnation lives (a background loop, a server). If it fails
   * or dies, the actor crashes and its supervisor restarts it.
   */
  readonly fork: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<void, never, R>
  /** Crash the actor on purpose (its supervisor decides whether it restarts). */
  readonly crash: (cause: Cause.Cause<unknown>) => Effect.Effect<void>
}

export class ActorContext extends Context.Tag("@reins/runtime/ActorContext")<ActorContext, ActorContextService>() {}
