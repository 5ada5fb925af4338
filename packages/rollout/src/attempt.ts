/**
 * One attempt end to end: launch, wait, verify. This is the unit the controller schedules; it
 * turns every way an attempt can go into an `AttemptResult` (launch errors become infrastructure
 * outcomes), so the controller only decides what to do next (record, retry, push the event).
 */
import { AttemptResult, type AttemptOutcome, type VerifierError, type VerifierReward } from "@reins/protocol"
import { Effect, type Scope } from "effect"
import { type AttemptHandle, type AttemptSpec, type Launcher, outcomeOfLaunchError } from "./launcher/Launcher.js"
import { runVerifier } from "./verifier.js"

export interface RunAttemptOptions {
  /** Called once the harness is running (the Gateway can mark the attempt `running`). */
  readonly onStarted?: (handle: AttemptHandle) => Effect.Effect<void>
}

/**
 * Launches the attempt on `launcher`, awaits it and runs the verifier. Interrupting the fiber
 * (or closing the surrounding scope) stops the attempt; `handle.cancel` from `onStarted` gives a
 * `Cancelled` outcome instead.
 */
export const runAttempt = (
  launcher: Launcher,
  spec: AttemptSpec,
  options: RunAttemptOptions = {}
): Effect.Effect<AttemptResult, never, Scope.Scope> =>
  Effect.gen(function*() {
    const startedAt = Date.now()
    const launched = yield* Effect.either(launcher.launch(spec))
    if (launched._tag === "Left") return resultOf(spec, outcomeOfLaunchError(launched.left), null, startedAt)
    return yield* followAttempt(launcher.kind, spec, launched.right, options, startedAt)
  })

/**
 * Awaits an attempt that runs already (just launched, or adopted after a restart) and runs the
 * verifier. Interrupting it does not stop the attempt: whoever holds the handle's scope does.
 */
export const followAttempt = (
  kind: Launcher["kind"],
  spec: AttemptSpec,
  handle: AttemptHandle,
  options: RunAttemptOptions = {},
  startedAt = Date.now()
): Effect.Effect<AttemptResult> =>
  Effect.gen(function*() {
    if (options.onStarted !== undefined) yield* options.onStarted(handle)
    const outcome = yield* handle.outcome
    const verifierSpec = spec.harness.verifier
    // The verifier only runs for harnesses that ran to an end.
    const verifier = verifierSpec === undefined || (outcome._tag !== "Succeeded" && outcome._tag !== "Failed")
      ? null
      : yield* runVerifier({
        verifier: verifierSpec,
        identity: spec,
        task: spec.task,
        taskExtra: spec.taskExtra,
        files: handle.files,
        outcome,
        // A Kubernetes harness's cwd is a path inside its container, meaningless on this node.
        defaultCwd: kind === "local" ? spec.harness.cwd : undefined
      }).pipe(Effect.merge)
    return resultOf(spec, outcome, verifier, startedAt)
  })

const resultOf = (spec: AttemptSpec, outcome: AttemptOutcome, verifier: VerifierReward | VerifierError | null, startedAt: number) =>
  new AttemptResult({ rolloutId: spec.rolloutId, attemptId: spec.attemptId, outcome, verifier, startedAt, finishedAt: Date.now() })
