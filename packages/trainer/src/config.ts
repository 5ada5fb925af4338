/**
 * Decoding the Trainer's configuration from user input (parsed JSON/YAML or an object written in
 * code) into `TrainerConfig` (@reins/protocol, where every key, default and bound is declared).
 * A typo must not silently fall back to a default, so unknown keys are errors that name the key
 * (with the closest known key as a hint), and every bad value names its key and what was expected.
 * All problems are reported at once.
 */
import { TrainerConfig } from "@reins/protocol"
import { Effect, Either, ParseResult, Schema } from "effect"

export { TrainerConfig } from "@reins/protocol"

export class ConfigIssue extends Schema.Class<ConfigIssue>("ConfigIssue")({
  /** The offending key ("" for the config as a whole). */
  key: Schema.String,
  message: Schema.String
}) {}

export class TrainerConfigError extends Schema.TaggedError<TrainerConfigError>()("TrainerConfigError", {
  issues: Schema.Array(ConfigIssue)
}) {
  override get message(): string {
    return `invalid trainer config: ${this.issues.map((i) => (i.key === "" ? i.message : `${i.key}: ${i.message}`)).join("; ")}`
  }
}

/** Every key the config accepts. */
export const configKeys: ReadonlyArray<string> = Object.keys(TrainerConfig.fields)

const editDistance = (a: string, b: string): number => {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const next = [i]
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    row = next
  }
  return row[b.length]!
}

/** The known key a typo most likely meant, if any is close. */
const closestKey = (key: string): string | undefined => {
  let best: string | undefined
  let bestDistance = Math.max(2, Math.floor(key.length / 3)) + 1
  for (const known of configKeys) {
    const d = editDistance(key.toLowerCase(), known)
    if (d < bestDistance) {
      best = known
      bestDistance = d
    }
  }
  return best
}

const unknownKey = (key: string): ConfigIssue => {
  const hint = closestKey(key)
  const message = hint === undefined ? `unknown key; known keys: ${configKeys.join(", ")}` : `unknown key (did you mean "${hint}"?)`
  return new ConfigIssue({ key, message })
}

const LITERAL = /^Expected (".*"), actual (.*)$/s

/**
 * One issue per key. Effect reports a value against each member of a union separately (each
 * literal of `schedule`, and `undefined` for every optional key): fold those into one message.
 */
const toIssues = (error: ParseResult.ParseError): Array<ConfigIssue> => {
  const byKey = new Map<string, Array<ParseResult.ArrayFormatterIssue>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const key = issue.path.map(String).join(".")
    byKey.set(key, [...(byKey.get(key) ?? []), issue])
  }
  return [...byKey].map(([key, issues]) => {
    if (issues.some((i) => i._tag === "Unexpected")) return unknownKey(key)
    const messages = [...new Set(issues.map((i) => i.message).filter((m) => !m.startsWith("Expected undefined,")))]
    const literals = messages.map((m) => LITERAL.exec(m)).filter((m) => m !== null)
    const message =
      literals.length > 1 && literals.length === messages.length
        ? `Expected ${literals.map((m) => m[1]).join(" | ")}, actual ${literals[0]![2]}`
        : messages.join("; ")
    return new ConfigIssue({ key, message })
  })
}

/** Rules that involve several keys. */
const crossChecks = (config: TrainerConfig): Array<ConfigIssue> => {
  const issues: Array<ConfigIssue> = []
  if (config.async_groups !== undefined && config.async_groups < config.batch_groups) {
    issues.push(
      new ConfigIssue({
        key: "async_groups",
        message: `${config.async_groups} groups kept running cannot fill a batch of batch_groups = ${config.batch_groups}; use at least ${config.batch_groups}`
      })
    )
  }
  if (config.max_seq_len !== undefined && config.micro_batch_tokens !== undefined && config.max_seq_len > config.micro_batch_tokens) {
    issues.push(
      new ConfigIssue({
        key: "max_seq_len",
        message: `a row of ${config.max_seq_len} tokens does not fit a micro-batch of micro_batch_tokens = ${config.micro_batch_tokens}`
      })
    )
  }
  return issues
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Decodes and validates; the error lists every problem. */
export const decodeTrainerConfigEither = (input: unknown): Either.Either<TrainerConfig, TrainerConfigError> => {
  if (!isRecord(input)) {
    const got = input === null ? "null" : Array.isArray(input) ? "an array" : typeof input
    return Either.left(new TrainerConfigError({ issues: [new ConfigIssue({ key: "", message: `expected an object of settings, got ${got}` })] }))
  }
  const decoded = Schema.decodeUnknownEither(TrainerConfig)(input, { onExcessProperty: "error", errors: "all" })
  if (Either.isLeft(decoded)) return Either.left(new TrainerConfigError({ issues: toIssues(decoded.left) }))
  const issues = crossChecks(decoded.right)
  return issues.length > 0 ? Either.left(new TrainerConfigError({ issues })) : Either.right(decoded.right)
}

/** Decodes a trainer config from user input. */
export const decodeTrainerConfig = (input: unknown): Effect.Effect<TrainerConfig, TrainerConfigError> =>
  Effect.suspend(() => decodeTrainerConfigEither(input))

/** A config built in code, with defaults for everything not given (throws `TrainerConfigError` on bad values). */
export const trainerConfig = (fields: Partial<Schema.Schema.Encoded<typeof TrainerConfig>> = {}): TrainerConfig =>
  Either.getOrThrowWith(decodeTrainerConfigEither(fields), (error) => error)
