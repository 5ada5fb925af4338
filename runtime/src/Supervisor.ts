/**
 * Supervision: every actor runs as a fiber that a supervisor restarts when it crashes (its start
 * failed, a handler died, or a fiber it forked with `ActorContext.fork` failed). How often and how
 * fast is a `RestartPolicy`: a `Schedule` stepped once per crash with the crash's `Cause`. Its
 * delay is the backoff before the restart; when it is done the supervisor escalates to the node,
 * which logs the failure and stops the actor and everything it started (its subtree).
 */
import { Cause, Clock, Duration, Effect, Option, Schedule, ScheduleDecision, ScheduleInterval, ScheduleIntervals } from "effect"

/** Stepped once per crash with the crash's cause; `done` means "give up and escalate". */
export type RestartPolicy = Schedule.Schedule<unknown, Cause.Cause<unknown>>

/**
 * Continues at most `n` times within any sliding `window`: the (n+1)-th crash within the window
 * makes it done. This is the "too many restarts" limit of the policy.
 */
export const atMostWithin = (n: number, window: Duration.DurationInput): Schedule.Schedule<number, unknown> => {
  const windowMs = Duration.toMillis(window)
  return Schedule.makeWithState<ReadonlyArray<number>, unknown, number>([], (now, _input, times) => {
    const recent = times.filter((t) => now - t < windowMs)
    return recent.length >= n
      ? Effect.succeed([recent, recent.length, ScheduleDecision.done] as const)
      : Effect.succeed([[...recent, now], recent.length + 1, ScheduleDecision.continueWith(ScheduleInterval.after(now))] as const)
  })
}

/**
 * Exponential backoff capped at `max`, starting over once the actor has not crashed for `quiet`
 * (a crash an hour after the last one restarts fast again).
 */
export const backoff = (options: {
  readonly initial: Duration.DurationInput
  readonly factor: number
  readonly max: Duration.DurationInput
  readonly quiet: Duration.DurationInput
}): Schedule.Schedule<Duration.Duration, unknown> => {
  const initial = Duration.toMillis(options.initial)
  const max = Duration.toMillis(options.max)
  const quiet = Duration.toMillis(options.quiet)
  return Schedule.makeWithState<{ readonly attempt: number; readonly last: number }, unknown, Duration.Duration>(
    { attempt: 0, last: Number.NEGATIVE_INFINITY },
    (now, _input, state) => {
      const attempt = now - state.last >= quiet ? 0 : state.attempt
      const delay = Math.min(max, initial * Math.pow(options.factor, attempt))
      return Effect.succeed([
        { attempt: attempt + 1, last: now },
        Duration.millis(delay),
        ScheduleDecision.continueWith(ScheduleInterval.after(now + delay))
      ] as const)
    }
  )
}

export interface PolicyOptions {
  /** First restart delay (default 200 ms); doubles (`factor`) on each further crash. */
  readonly initialDelay?: Duration.DurationInput
  readonly factor?: number
  /** Backoff cap (default 5 s). */
  readonly maxDelay?: Duration.DurationInput
  /** At most this many restarts within `within` (default 5 per minute), then escalate. */
  readonly maxRestarts?: number
  readonly within?: Duration.DurationInput
}

/** The usual policy: capped exponential backoff, at most N restarts per window, then escalate. */
export const policy = (options: PolicyOptions = {}): RestartPolicy => {
  const within = options.within ?? Duration.minutes(1)
  return backoff({
    initial: options.initialDelay ?? Duration.millis(200),
    factor: options.factor ?? 2,
    max: options.maxDelay ?? Duration.seconds(5),
    quiet: within
  }).pipe(Schedule.intersect(atMostWithin(options.maxRestarts ?? 5, within)), Schedule.asVoid)
}

/** 200 ms doubling up to 5 s, at most 5 restarts per minute. */
export const defaultPolicy: RestartPolicy = policy()

/** Never restart: the first crash escalates. */
export const never: RestartPolicy = Schedule.stop

/** Steps a policy by hand so the supervisor can log the delay before sleeping. */
const makeRestarts = (restartPolicy: RestartPolicy) => {
  let state: unknown = restartPolicy.initial
  return (cause: Cause.Cause<unknown>): Effect.Effect<Option.Option<Duration.Duration>> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.map(restartPolicy.step(now, cause, state), ([next, , decision]) => {
        state = next
        if (ScheduleDecision.isDone(decision)) return Option.none()
        return Option.some(Duration.millis(Math.max(0, ScheduleIntervals.start(decision.intervals) - now)))
      }))
}

/** What one incarnation of an actor reports back to its supervisor. */
export interface Incarnation {
  /** Resolves with the cause of the crash; never resolves while the actor is healthy. */
  readonly crashed: Effect.Effect<Cause.Cause<unknown>>
  /** Stops this incarnation (interrupts its fibers, runs its finalizers). */
  readonly close: Effect.Effect<void>
}

/**
 * Runs `start` (one incarnation) again and again under `restartPolicy`. A failed start counts as a
 * crash. Returns after escalating; otherwise runs until interrupted, which closes the current
 * incarnation.
 */
export const supervise = (options: {
  readonly name: string
  readonly restartPolicy: RestartPolicy
  readonly start: Effect.Effect<Incarnation, unknown>
  /**
   * Called after a crash, before the incarnation closes, so that calls still in flight learn
   * whether the actor restarts (`Some(delay)`) or is stopped by escalation (`None`).
   */
  readonly onCrash: (decision: Option.Option<Duration.Duration>, restarts: number) => Effect.Effect<void>
  /** Called when the supervisor is interrupted (its scope closes), before the incarnation closes. */
  readonly onStop: Effect.Effect<void>
}): Effect.Effect<void> => {
  let close: Effect.Effect<void> = Effect.void
  const closeCurrent = Effect.suspend(() => {
    const current = close
    close = Effect.void
    return current
  })
  return Effect.gen(function*() {
    const next = makeRestarts(options.restartPolicy)
    let restarts = 0
    while (true) {
      const started = yield* Effect.exit(options.start)
      let crash: Cause.Cause<unknown>
      if (started._tag === "Failure") {
        if (Cause.isInterruptedOnly(started.cause)) return yield* Effect.interrupt
        crash = started.cause
      } else {
        close = started.value.close
        crash = yield* started.value.crashed
      }
      const decision = yield* next(crash)
      yield* options.onCrash(decision, restarts)
      yield* closeCurrent
      if (Option.isNone(decision)) {
        yield* Effect.logError(
          `actor "${options.name}" crashed too often (${restarts} restarts); escalating to the node, which stops it and its children`,
          crash
        )
        return
      }
      restarts++
      yield* Effect.logWarning(
        `actor "${options.name}" crashed; restart #${restarts} in ${Duration.format(decision.value)}`,
        crash
      )
      yield* Effect.sleep(decision.value)
    }
  }).pipe(
    Effect.onInterrupt(() => Effect.zipRight(options.onStop, closeCurrent)),
    Effect.annotateLogs({ actor: options.name })
  )
}
