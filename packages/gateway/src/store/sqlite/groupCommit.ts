/**
 * Group commit for call records: the records that arrive in one turn of the event loop share one
 * transaction (one WAL append instead of one per call), and each caller resumes after it.
 */
import { NotFound, type StoreError, type StoreEvent } from "@reins/protocol"
import { Effect, type PubSub } from "effect"

export interface GroupCommitOptions<I, O, Emit> {
  /** Runs `body` in one transaction with an `Emit` that logs events; returns its result and those events. Throws when it aborted. */
  readonly transact: <A>(body: (emit: Emit) => A) => { readonly result: A; readonly events: ReadonlyArray<StoreEvent> }
  /** Writes one item. A `NotFound` thrown before it wrote anything fails that item only; anything else aborts the batch. */
  readonly write: (item: I, emit: Emit) => O
  /** Where committed events go (unbounded: offering never waits, so no fiber is needed to publish). */
  readonly published: PubSub.PubSub<StoreEvent>
  readonly fail: (e: unknown) => StoreError
}

export const makeGroupCommit = <I, O, Emit>({ fail, published, transact, write }: GroupCommitOptions<I, O, Emit>) => {
  let queue: Array<{ readonly item: I; readonly resume: (e: Effect.Effect<O, StoreError | NotFound>) => void }> = []
  const flush = () => {
    const batch = queue
    queue = []
    let committed: { readonly result: ReadonlyArray<O | NotFound>; readonly events: ReadonlyArray<StoreEvent> }
    try {
      committed = transact((emit) =>
        batch.map(({ item }) => {
          try {
            return write(item, emit)
          } catch (e) {
            if (e instanceof NotFound) return e
            throw e
          }
        })
      )
    } catch (e) {
      const failure = Effect.fail(fail(e))
      for (const { resume } of batch) resume(failure)
      return
    }
    for (const e of committed.events) published.unsafeOffer(e)
    batch.forEach(({ resume }, i) => {
      const r = committed.result[i]!
      resume(r instanceof NotFound ? Effect.fail(r) : Effect.succeed(r))
    })
  }
  /** Writes `item` with the next group of writes; succeeds once they committed. */
  return (item: I): Effect.Effect<O, StoreError | NotFound> =>
    Effect.async((resume) => {
      queue.push({ item, resume })
      if (queue.length === 1) setImmediate(flush)
    })
}
