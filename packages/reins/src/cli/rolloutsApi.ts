/**
 * The admin API as `reins rollouts` reads it: the Gateway's URL and admin token, one GET, the
 * reply decoded with a schema of the fields the command shows (unknown ones are kept for
 * `--json`). Every failure is one sentence: unreachable Gateway, refused token, the API's error.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { readFileSync } from "node:fs"
import path from "node:path"

export class RolloutsCliError extends Data.TaggedError("RolloutsCliError")<{ readonly message: string }> {}

/** `REINS_ADMIN_TOKEN`, else `<data>/admin-token` (the file `reins serve` and `reins train` write). */
export const adminToken = (data: string): Effect.Effect<string, RolloutsCliError> =>
  Effect.try({
    try: () => {
      const env = process.env.REINS_ADMIN_TOKEN?.trim()
      if (env) return env
      const token = readFileSync(path.join(data, "admin-token"), "utf8").trim()
      if (token === "") throw new Error("it is empty")
      return token
    },
    catch: (e) =>
      new RolloutsCliError({
        message: `no admin token: set REINS_ADMIN_TOKEN or pass --data DIR of the Gateway (reading ${path.join(data, "admin-token")}: ${e instanceof Error ? e.message : String(e)})`
      })
  })

const ApiErrorBody = Schema.Struct({ error: Schema.Struct({ message: Schema.String }) })

/** GETs `path` from the Gateway at `url` and decodes the reply with `schema`. */
export const getJson = <A, I>(url: string, token: string, route: string, schema: Schema.Schema<A, I>): Effect.Effect<{ readonly value: A; readonly raw: unknown }, RolloutsCliError> =>
  Effect.gen(function* () {
    const base = url.replace(/\/+$/, "")
    const res = yield* Effect.tryPromise({
      try: (signal) => fetch(base + route, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.any([signal, AbortSignal.timeout(30_000)]) }),
      catch: (e) => new RolloutsCliError({ message: `cannot reach the Gateway at ${base}: ${e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e)}` })
    })
    const text = yield* Effect.tryPromise({ try: () => res.text(), catch: () => new RolloutsCliError({ message: `the Gateway at ${base} cut the reply short` }) })
    const raw = yield* Effect.try({ try: () => JSON.parse(text) as unknown, catch: () => new RolloutsCliError({ message: `${base}${route} did not answer JSON (HTTP ${res.status}); is --url the Gateway's?` }) })
    if (!res.ok) {
      const message = Schema.is(ApiErrorBody)(raw) ? raw.error.message : `HTTP ${res.status}`
      return yield* Effect.fail(new RolloutsCliError({ message: res.status === 401 ? `the Gateway refused the admin token: ${message}` : message }))
    }
    const value = yield* Schema.decodeUnknown(schema)(raw).pipe(
      Effect.mapError((e) => new RolloutsCliError({ message: `unexpected reply from ${base}${route}: ${e.message}` }))
    )
    return { value, raw }
  })

const State = Schema.Literal("queued", "running", "succeeded", "failed", "cancelled")

export const RolloutRow = Schema.Struct({
  id: Schema.String,
  task: Schema.Unknown,
  group: Schema.NullOr(Schema.String),
  state: State,
  attempts: Schema.Number,
  reward: Schema.NullOr(Schema.Number),
  created_at: Schema.Number,
  calls: Schema.Number,
  output_tokens: Schema.Number,
  versions: Schema.Struct({ min: Schema.NullOr(Schema.Number), max: Schema.NullOr(Schema.Number) }),
  duration_ms: Schema.NullOr(Schema.Number)
})
export type RolloutRow = typeof RolloutRow.Type

export const RolloutList = Schema.Struct({ data: Schema.Array(RolloutRow), next_cursor: Schema.NullOr(Schema.String) })

export const RolloutDetail = Schema.Struct({
  id: Schema.String,
  task: Schema.Unknown,
  group: Schema.NullOr(Schema.String),
  state: State,
  reward: Schema.NullOr(Schema.Number),
  attempts: Schema.Array(Schema.Struct({ id: Schema.String, index: Schema.Number, state: State, reason: Schema.NullOr(Schema.String) })),
  calls: Schema.Array(
    Schema.Struct({
      id: Schema.String,
      attempt_id: Schema.String,
      seq: Schema.Number,
      endpoint: Schema.String,
      status: Schema.Number,
      error: Schema.NullOr(Schema.String),
      finish_reason: Schema.NullOr(Schema.String),
      prompt_token_ids: Schema.Array(Schema.Number),
      output_token_ids: Schema.Array(Schema.Number),
      reuse: Schema.Struct({ reused_tokens: Schema.Number, from_call_id: Schema.NullOr(Schema.String), break: Schema.NullOr(Schema.String) })
    })
  ),
  rewards: Schema.Array(Schema.Struct({ reward: Schema.Number, call_id: Schema.NullOr(Schema.String) }))
})
export type RolloutDetail = typeof RolloutDetail.Type

export const TokenSegment = Schema.Struct({
  attempt_id: Schema.String,
  index: Schema.Number,
  start: Schema.String,
  tokens: Schema.Number,
  action_tokens: Schema.Number,
  token_ids: Schema.Array(Schema.Number),
  text: Schema.NullOr(Schema.Array(Schema.String)),
  roles: Schema.Array(Schema.Literal("prompt", "observation", "action")),
  logprobs: Schema.Array(Schema.NullOr(Schema.Number)),
  versions: Schema.Array(Schema.NullOr(Schema.Number)),
  calls: Schema.Array(Schema.Struct({
    seq: Schema.Number,
    start: Schema.Number,
    end: Schema.Number,
    trained: Schema.NullOr(Schema.Struct({ version: Schema.Number, advantage: Schema.Number, loss_weight: Schema.Number, tokens: Schema.Number }))
  }))
})
export type TokenSegment = typeof TokenSegment.Type

export const RolloutTokens = Schema.Struct({ segments: Schema.Array(TokenSegment) })
