/**
 * List + watch + periodic reconcile of one resource collection, the way Kubernetes controllers
 * follow state:
 *
 * - list (a full picture, handed to `onList`), then watch from the list's resourceVersion;
 * - when the server closes the watch (it does so routinely, every few minutes), watch again from
 *   the last resourceVersion seen: nothing is missed, nothing replayed;
 * - a `410 Gone` (the version was compacted away) means relist;
 * - network errors back off exponentially, then relist;
 * - independently, relist every `reconcileEvery`, so a missed event can never leave an attempt
 *   waiting forever.
 */
import { Duration, Effect, Queue, type Scope } from "effect"
import type { KubeApi, KubeRequestError, ListResult } from "./api.js"
import type { FailureLog } from "./failureLog.js"

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED"

export interface FollowOptions<A> {
  readonly api: KubeApi
  /** e.g. `/apis/batch/v1/namespaces/NS/jobs` */
  readonly path: string
  readonly labelSelector: string
  readonly list: Effect.Effect<ListResult<A>, KubeRequestError>
  readonly onList: (items: ReadonlyArray<A>) => Effect.Effect<void>
  readonly onEvent: (type: WatchEventType, object: A) => Effect.Effect<void>
  readonly reconcileEvery: Duration.DurationInput
  /** Counters for observability and tests. */
  readonly stats: WatchStats
  /** Where list and watch failures are logged (rate-limited). */
  readonly failures: FailureLog
}

export interface WatchStats {
  watches: number
  relists: number
  events: number
}

type Msg =
  | { readonly _tag: "event"; readonly type: string; readonly object: any }
  | { readonly _tag: "done"; readonly error: unknown }

type WatchEnd =
  | { readonly _tag: "Closed"; readonly resourceVersion: string | undefined; readonly lastedMs: number }
  | { readonly _tag: "Expired" }
  | { readonly _tag: "Failed"; readonly resourceVersion: string | undefined; readonly status: number | null; readonly message: string }

const backoff = (failures: number) => Duration.millis(Math.min(10_000, 100 * 2 ** Math.min(failures, 7)) * (0.5 + Math.random() / 2))

/** One watch request, until the server closes it or it fails. */
const watchOnce = <A>(opts: FollowOptions<A>, resourceVersion: string | undefined): Effect.Effect<WatchEnd> =>
  Effect.scoped(
    Effect.gen(function*() {
      const queue = yield* Queue.unbounded<Msg>()
      const startedAt = Date.now()
      opts.stats.watches++
      // `watch` resolves with its AbortController only once the response has started; the
      // finalizer aborts it whenever that happens, so closing never waits on the network.
      const started = opts.api.watcher.watch(
        opts.path,
        { labelSelector: opts.labelSelector, resourceVersion, allowWatchBookmarks: true },
        (type, object) => void Queue.unsafeOffer(queue, { _tag: "event", type, object }),
        (error) => void Queue.unsafeOffer(queue, { _tag: "done", error })
      )
      yield* Effect.addFinalizer(() =>
        Effect.sync(() =>
          void started.then(
            (controller) => controller.abort(),
            (error) => void Queue.unsafeOffer(queue, { _tag: "done", error })
          )
        )
      )
      started.catch((error) => void Queue.unsafeOffer(queue, { _tag: "done", error }))
      let rv = resourceVersion
      while (true) {
        const msg = yield* Queue.take(queue)
        if (msg._tag === "done") {
          if (msg.error === null || msg.error === undefined) return { _tag: "Closed", resourceVersion: rv, lastedMs: Date.now() - startedAt } as const
          const status = (msg.error as { statusCode?: number }).statusCode
          if (status === 410) return { _tag: "Expired" } as const
          const message = String((msg.error as Error).message ?? msg.error)
          return { _tag: "Failed", resourceVersion: rv, status: status ?? null, message: status === undefined ? message : `HTTP ${status}: ${message}` } as const
        }
        if (msg.type === "ERROR") {
          // A Status object: 410 Gone/Expired means our resourceVersion is too old.
          if (msg.object?.code === 410) return { _tag: "Expired" } as const
          return {
            _tag: "Failed",
            resourceVersion: rv,
            status: typeof msg.object?.code === "number" ? msg.object.code : null,
            message: `watch error: ${msg.object?.code ?? ""} ${msg.object?.reason ?? ""}: ${msg.object?.message ?? JSON.stringify(msg.object)}`
          } as const
        }
        rv = msg.object?.metadata?.resourceVersion ?? rv
        if (msg.type === "BOOKMARK") continue
        if (msg.type === "ADDED" || msg.type === "MODIFIED" || msg.type === "DELETED") {
          opts.stats.events++
          yield* opts.onEvent(msg.type, msg.object as A)
        }
      }
    })
  )

const relist = <A>(opts: FollowOptions<A>) =>
  opts.list.pipe(
    Effect.tap((l) => {
      opts.stats.relists++
      return opts.onList(l.items)
    })
  )

/** Runs until interrupted (forked into the launcher's scope). */
const watchLoop = <A>(opts: FollowOptions<A>): Effect.Effect<never> =>
  Effect.gen(function*() {
    let rv: string | undefined = undefined
    let needList = true
    let failures = 0
    while (true) {
      if (needList) {
        const listed = yield* Effect.either(relist(opts))
        if (listed._tag === "Left") {
          failures++
          yield* opts.failures.warn(`list ${opts.path} ${listed.left.status ?? "network"}`, `${opts.path}: ${listed.left.message}; relisting after backoff`)
          yield* Effect.sleep(backoff(failures))
          continue
        }
        rv = listed.right.resourceVersion
        needList = false
      }
      const end = yield* watchOnce(opts, rv)
      switch (end._tag) {
        case "Closed":
          rv = end.resourceVersion
          // A server that closes watches at once must not make us spin.
          failures = end.lastedMs < 1_000 ? failures + 1 : 0
          if (failures > 0) yield* Effect.sleep(backoff(failures))
          break
        case "Expired":
          needList = true
          break
        case "Failed":
          failures++
          yield* opts.failures.warn(`watch ${opts.path} ${end.status ?? "network"}`, `watch ${opts.path}: ${end.message}; watching again after backoff`)
          yield* Effect.sleep(backoff(failures))
          rv = end.resourceVersion
          break
      }
    }
  })

const reconcileLoop = <A>(opts: FollowOptions<A>): Effect.Effect<never> =>
  Effect.sleep(opts.reconcileEvery).pipe(
    Effect.zipRight(relist(opts).pipe(Effect.catchAll((e) => opts.failures.warn(`list ${opts.path} ${e.status ?? "network"}`, `reconcile ${opts.path}: ${e.message}`)))),
    Effect.forever
  )

/** Starts following in the background; stops when the scope closes. */
export const followCollection = <A>(opts: FollowOptions<A>): Effect.Effect<void, never, Scope.Scope> =>
  Effect.all([Effect.forkScoped(watchLoop(opts)), Effect.forkScoped(reconcileLoop(opts))], { discard: true })
