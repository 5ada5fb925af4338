/**
 * The pause gate (the Gateway side of the collocated-async protocol).
 *
 * Every model call `enter`s the gate before it generates and `release`s it when its
 * generation has ended. `pause` closes the gate — new calls are *held*, never refused — and
 * asks the backend to free the device (`drain`: in-flight generations finish; `interrupt`: they
 * stop at a token boundary and continue after resume). `resume` reopens it. A call held longer
 * than `maxHold` gets a 503 with `Retry-After`.
 *
 * Admission is one synchronous step (check `paused`, count the call in flight), so a call is
 * either counted before a pause begins — and the pause waits for it — or it waits at the gate.
 */
import { GatewayError, GatewayState, type PauseMode, type StoreError } from "@reins/protocol"
import { Context, Data, Duration, Effect } from "effect"
import type { MetricsService } from "../metrics.js"
import type { StoreService } from "../store/Store.js"

/** What the gate pauses: the token engine, or an upstream server (which can only be drained). */
export interface GateBackend {
  /** Resolves once the device is free. `idle` resolves when no admitted call is still generating. */
  readonly pause: (mode: PauseMode, idle: Effect.Effect<void>) => Effect.Effect<void, GatewayError>
  readonly resume: Effect.Effect<void, GatewayError>
  readonly model: Effect.Effect<{ readonly id: string; readonly version: number }>
  /** Reads the served model again (`model` may be a cached reading). */
  readonly refresh: Effect.Effect<{ readonly id: string; readonly version: number }>
}

export class HeldTooLong extends Data.TaggedError("HeldTooLong")<{
  readonly maxHoldSeconds: number
}> {}

/** The Gateway is shutting down: held and new calls are refused (503) instead of waiting forever. */
export class GateClosed extends Data.TaggedError("GateClosed")<{}> {}

/** A call's pass through the gate. `release` is idempotent. */
export interface Admission {
  readonly heldMs: number
  readonly release: Effect.Effect<void>
}

export interface PauseGateService {
  /** Waits while paused (at most `maxHold`), then counts the call in flight. */
  readonly enter: Effect.Effect<Admission, HeldTooLong | GateClosed>
  readonly pause: (mode: PauseMode) => Effect.Effect<GatewayState, GatewayError>
  readonly resume: Effect.Effect<GatewayState, GatewayError>
  readonly state: Effect.Effect<GatewayState>
  /**
   * The weights were swapped while calls went on (the split schedule never pauses): reads the
   * version served now and records it, as `resume` does after an update.
   */
  readonly swapped: Effect.Effect<GatewayState>
  /** Refuses held and new calls from now on (at shutdown). */
  readonly close: Effect.Effect<void>
}

export class PauseGate extends Context.Tag("@reins/gateway/PauseGate")<PauseGate, PauseGateService>() {}

export interface PauseGateOptions {
  readonly backend: GateBackend
  readonly store: StoreService
  readonly metrics: MetricsService
  /** How long a call may be held; default 10 minutes. */
  readonly maxHold?: Duration.DurationInput
}

export const make = (options: PauseGateOptions): Effect.Effect<PauseGateService> =>
  Effect.gen(function* () {
    const { backend, store, metrics } = options
    const maxHold = Duration.decode(options.maxHold ?? "10 minutes")
    const open = yield* Effect.makeLatch(true)
    const idle = yield* Effect.makeLatch(true)
    const lock = yield* Effect.makeSemaphore(1)
    let closed = false
    let paused = false
    let mode: PauseMode | null = null
    let pausedAt = 0
    let held = 0
    let inFlight = 0
    let lastDrainSeconds: number | null = null

    const setInFlight = (n: number) => {
      inFlight = n
      if (n === 0) idle.unsafeOpen()
      else idle.unsafeClose()
      metrics.inFlight.set(n)
    }

    const admission = (heldMs: number): Admission => {
      let released = false
      return {
        heldMs,
        release: Effect.sync(() => {
          if (released) return
          released = true
          setInFlight(inFlight - 1)
        })
      }
    }

    /** The atomic step: admit unless paused (fail once closed). */
    const tryAdmit: Effect.Effect<boolean, GateClosed> = Effect.suspend(() => {
      if (closed) return Effect.fail(new GateClosed())
      if (paused) return Effect.succeed(false)
      setInFlight(inFlight + 1)
      return Effect.succeed(true)
    })

    const waitAndAdmit: Effect.Effect<void, GateClosed> = Effect.flatMap(open.await, () =>
      Effect.flatMap(tryAdmit, (ok) => (ok ? Effect.void : waitAndAdmit))
    )

    const enter: Effect.Effect<Admission, HeldTooLong | GateClosed> = Effect.flatMap(tryAdmit, (ok) => {
      if (ok) return Effect.succeed(admission(0))
      const start = Date.now()
      return Effect.acquireUseRelease(
        Effect.sync(() => metrics.held.set(++held)),
        () =>
          waitAndAdmit.pipe(
            Effect.timeoutFail({
              duration: maxHold,
              onTimeout: () => new HeldTooLong({ maxHoldSeconds: Duration.toSeconds(maxHold) })
            })
          ),
        () => Effect.sync(() => metrics.held.set(--held))
      ).pipe(
        Effect.map(() => {
          const heldMs = Date.now() - start
          metrics.heldSeconds.observe(heldMs / 1000)
          return admission(heldMs)
        })
      )
    })

    const state = Effect.map(backend.model, (model) =>
      new GatewayState({
        paused,
        mode,
        held,
        inFlight,
        pausedSeconds: paused ? (Date.now() - pausedAt) / 1000 : 0,
        lastDrainSeconds,
        modelId: model.id,
        version: model.version
      })
    )

    /** A store write the gate logs rather than fails on. */
    const warnIfFailed = (what: string, write: Effect.Effect<unknown, StoreError>) =>
      write.pipe(
        Effect.catchAll((e) => Effect.logWarning(`could not record ${what}: ${e.message}`)),
        Effect.asVoid
      )

    const logEvent = (type: "gateway.paused" | "gateway.resumed", data: unknown) => warnIfFailed(type, store.recordEvent(type, data))

    // Logged, not failed: a version the store could not record must not keep held calls waiting
    // (on resume) nor fail an update that has already happened (on a swap).
    const recordModel = (model: { readonly id: string; readonly version: number }) =>
      warnIfFailed(`model version ${model.version}`, store.recordModelVersion({ version: model.version, modelId: model.id }))

    const pause = (m: PauseMode) =>
      lock.withPermits(1)(
        Effect.gen(function* () {
          if (paused) return yield* state
          paused = true
          mode = m
          pausedAt = Date.now()
          yield* open.close
          metrics.paused.set(1)
          yield* backend.pause(m, idle.await).pipe(
            Effect.tapError(() =>
              // The device could not be freed: do not keep harnesses waiting for a pause that failed.
              Effect.gen(function* () {
                paused = false
                mode = null
                metrics.paused.set(0)
                yield* open.open
              })
            )
          )
          lastDrainSeconds = (Date.now() - pausedAt) / 1000
          metrics.drainSeconds.observe(lastDrainSeconds)
          yield* logEvent("gateway.paused", { mode: m, drainSeconds: lastDrainSeconds, inFlight, held })
          return yield* state
        })
      )

    const resume = lock.withPermits(1)(
      Effect.gen(function* () {
        if (!paused) return yield* state
        yield* backend.resume
        const pausedSeconds = (Date.now() - pausedAt) / 1000
        const model = yield* backend.model
        paused = false
        mode = null
        metrics.paused.set(0)
        metrics.pauseSeconds.observe(pausedSeconds)
        yield* recordModel(model)
        yield* logEvent("gateway.resumed", { pausedSeconds, version: model.version, held })
        yield* open.open
        return yield* state
      })
    )

    const swapped = lock.withPermits(1)(Effect.flatMap(backend.refresh, (model) => Effect.zipRight(recordModel(model), state)))

    const close = Effect.suspend(() => {
      closed = true
      return open.open
    })

    return { enter, pause, resume, state, swapped, close } satisfies PauseGateService
  })
