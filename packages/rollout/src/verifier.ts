/**
 * The verifier: a command run after the harness exits that decides the reward, so the deployed
 * harness stays untouched by training concerns. It runs in its own process group like a harness
 * (timeout, capped logs, no orphans) and sees:
 *
 *   REINS_TASK / REINS_TASK_FILE   the whole task line as JSON (extras such as a reference answer included)
 *   REINS_TASK_ID, REINS_ROLLOUT_ID, REINS_ATTEMPT_ID
 *   REINS_STDOUT_FILE / REINS_STDERR_FILE   the harness's captured output
 *   REINS_EXIT_CODE                 the harness's exit code ("" when it died of a signal)
 *   REINS_SIGNAL                    the signal that ended it, or ""
 *   REINS_OUTCOME                   "succeeded" | "failed"
 *   REINS_FAILURE                   "exit" | "timeout" | "signal" | ""
 *
 * Its last non-empty stdout line is the reward: a number, or a JSON object `{"reward": number,
 * ...}` (the other fields are kept as details). Anything else — garbage, NaN, a timeout, a
 * non-zero exit, no output — is a `VerifierError` carrying the output tails: recorded, never a crash.
 */
import { AttemptLogs, type AttemptFailed, type AttemptSucceeded, type LogCapture, type Task, VerifierError, VerifierReward, type VerifierSpec } from "@reins/protocol"
import { Effect, Either, Option } from "effect"
import { type AttemptIdentity, envWithout } from "./harness/env.js"
import { type AttemptFiles, taskRecordJson } from "./harness/files.js"
import { readFileTail } from "./harness/logTails.js"
import { spawnGroup } from "./process/processGroup.js"

export interface VerifierInput {
  readonly verifier: VerifierSpec
  readonly identity: Pick<AttemptIdentity, "rolloutId" | "attemptId">
  readonly task: Task
  readonly taskExtra?: Readonly<Record<string, unknown>>
  readonly files: AttemptFiles
  /** How the harness ended; the verifier only runs for harnesses that ran to an end. */
  readonly outcome: AttemptSucceeded | AttemptFailed
  /** Working directory when the verifier spec has none (the launcher passes the harness's). */
  readonly defaultCwd?: string
}

const TAIL_BYTES = 1024

/** The last `bytes` of a file as text ("" when it cannot be read). */
const readTail = (path: string, bytes: number): Effect.Effect<string> =>
  Effect.try(() => readFileTail(path, bytes)?.text ?? "").pipe(Effect.orElseSucceed(() => ""))

const parseJson = Option.liftThrowable((text: string): unknown => JSON.parse(text))

/** The reward in a verifier's last line, or why there is none. */
export const parseRewardLine = (line: string): Either.Either<{ value: number; details: unknown }, string> => {
  const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line
  const expected = `expected a number or {"reward": number} as the last stdout line, got ${JSON.stringify(shown)}`
  const parsed = parseJson(line)
  if (Option.isNone(parsed)) return Either.left(expected)
  const json = parsed.value
  if (typeof json === "number") return Either.right({ value: json, details: null })
  if (typeof json === "object" && json !== null && !Array.isArray(json)) {
    const reward = (json as Record<string, unknown>).reward
    if (typeof reward === "number" && Number.isFinite(reward)) return Either.right({ value: reward, details: json })
    return Either.left(`{"reward": ...} must hold a finite number, got ${JSON.stringify(shown)}`)
  }
  return Either.left(expected)
}

const lastLine = (text: string): string | undefined =>
  text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== "").at(-1)

const verifierEnv = (input: VerifierInput): Record<string, string> => {
  const o = input.outcome
  return Object.assign(envWithout(process.env, /^(OPENAI|REINS)_/), input.verifier.env, {
    REINS_TASK: taskRecordJson(input.task, input.taskExtra),
    REINS_TASK_FILE: input.files.taskRecordFile,
    REINS_TASK_ID: input.task.id,
    REINS_ROLLOUT_ID: input.identity.rolloutId,
    REINS_ATTEMPT_ID: input.identity.attemptId,
    REINS_STDOUT_FILE: input.files.stdout,
    REINS_STDERR_FILE: input.files.stderr,
    REINS_EXIT_CODE: o.exitCode === null ? "" : String(o.exitCode),
    REINS_SIGNAL: o._tag === "Failed" ? o.signal ?? "" : "",
    REINS_OUTCOME: o._tag === "Succeeded" ? "succeeded" : "failed",
    REINS_FAILURE: o._tag === "Failed" ? o.reason : ""
  })
}

export const runVerifier = (input: VerifierInput): Effect.Effect<VerifierReward, VerifierError> =>
  Effect.scoped(
    Effect.gen(function*() {
      const v = input.verifier
      const command = v.command.join(" ")
      const group = yield* spawnGroup({
        command: v.command,
        cwd: v.cwd ?? input.defaultCwd,
        env: verifierEnv(input),
        timeoutMs: v.timeout_s * 1000,
        graceMs: 2_000,
        stdoutFile: input.files.verifierStdout,
        stderrFile: input.files.verifierStderr,
        maxLogBytes: v.max_log_bytes,
        nice: v.nice,
        pidFile: input.files.verifierPidFile,
        pidRecord: { attemptId: input.identity.attemptId, rolloutId: input.identity.rolloutId }
      }).pipe(
        Effect.mapError((e) =>
          new VerifierError({ reason: e.reason, message: `verifier ${e.message}`, exitCode: null, signal: null, stdoutTail: "", stderrTail: "", logs: null })
        )
      )
      const exit = yield* group.exit
      const stdoutTail = yield* readTail(input.files.verifierStdout, TAIL_BYTES)
      const stderrTail = yield* readTail(input.files.verifierStderr, TAIL_BYTES)
      const logs = new AttemptLogs({ stdout: exit.stdout, stderr: exit.stderr })
      const fail = (reason: VerifierError["reason"], message: string) =>
        new VerifierError({ reason, message, exitCode: exit.exitCode, signal: exit.signal, stdoutTail, stderrTail, logs })
      if (exit.stoppedBy === "timeout") return yield* fail("timeout", `verifier ${command} timed out after ${v.timeout_s} s`)
      if (exit.exitCode !== 0) {
        const how = exit.exitCode === null ? `was killed by ${exit.signal}` : `exited with code ${exit.exitCode}`
        return yield* fail("exit", `verifier ${command} ${how}`)
      }
      if (exit.stdout.droppedBytes > 0) {
        return yield* fail("garbage", `verifier ${command} printed more than max_log_bytes (${v.max_log_bytes}) on stdout: its last line was cut off`)
      }
      const line = lastLine(yield* lastLineSource(exit.stdout, stdoutTail))
      if (line === undefined) return yield* fail("no-output", `verifier ${command} printed nothing on stdout`)
      const parsed = parseRewardLine(line)
      if (Either.isLeft(parsed)) return yield* fail("garbage", `verifier ${command}: ${parsed.left}`)
      return new VerifierReward({ value: parsed.right.value, details: parsed.right.details, durationMs: exit.durationMs, logs })
    })
  ).pipe(Effect.withSpan("runVerifier", { attributes: { attemptId: input.identity.attemptId } }))

/** The text whose last line is the reward: a longer tail when the last line could exceed the short one. */
const lastLineSource = (stdout: LogCapture, shortTail: string) =>
  stdout.bytes <= TAIL_BYTES ? Effect.succeed(shortTail) : readTail(stdout.path, 64 * 1024)
