/**
 * The SQLite schema, as @effect/sql migrations (applied in order, recorded in
 * `reins_migrations`). Never edit a shipped migration: add the next one.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const m0001_init = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE rollouts (
      id TEXT PRIMARY KEY,
      task TEXT NOT NULL,
      grp TEXT,
      state TEXT NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      reward REAL,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    )`
  yield* sql`CREATE INDEX rollouts_by_state ON rollouts (state, id)`
  yield* sql`CREATE INDEX rollouts_by_group ON rollouts (grp, id)`
  yield* sql`
    CREATE TABLE attempts (
      id TEXT PRIMARY KEY,
      rollout_id TEXT NOT NULL REFERENCES rollouts (id),
      idx INTEGER NOT NULL,
      key_hash TEXT NOT NULL UNIQUE,
      state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
      reason TEXT,
      created_at INTEGER NOT NULL,
      started_at INTEGER,
      finished_at INTEGER,
      UNIQUE (rollout_id, idx)
    )`
  yield* sql`
    CREATE TABLE calls (
      id TEXT PRIMARY KEY,
      attempt_id TEXT NOT NULL REFERENCES attempts (id),
      rollout_id TEXT NOT NULL REFERENCES rollouts (id),
      seq INTEGER NOT NULL,
      endpoint TEXT NOT NULL,
      model TEXT NOT NULL,
      status INTEGER NOT NULL,
      error TEXT,
      request TEXT,
      response TEXT,
      prompt_ids BLOB NOT NULL,
      output_ids BLOB NOT NULL,
      logprobs BLOB NOT NULL,
      versions BLOB NOT NULL,
      finish_reason TEXT,
      trainable INTEGER NOT NULL,
      reused_tokens INTEGER NOT NULL,
      reuse_from TEXT,
      break_reason TEXT,
      received_at INTEGER NOT NULL,
      started_at INTEGER,
      first_token_at INTEGER,
      finished_at INTEGER NOT NULL,
      held_ms REAL NOT NULL,
      UNIQUE (attempt_id, seq)
    )`
  yield* sql`CREATE INDEX calls_by_rollout ON calls (rollout_id, attempt_id, seq)`
  yield* sql`
    CREATE TABLE rewards (
      id TEXT PRIMARY KEY,
      rollout_id TEXT NOT NULL REFERENCES rollouts (id),
      attempt_id TEXT NOT NULL REFERENCES attempts (id),
      call_id TEXT REFERENCES calls (id),
      value REAL NOT NULL,
      info TEXT,
      created_at INTEGER NOT NULL
    )`
  yield* sql`CREATE INDEX rewards_by_rollout ON rewards (rollout_id, id)`
  yield* sql`
    CREATE TABLE model_versions (
      version INTEGER PRIMARY KEY,
      model_id TEXT NOT NULL,
      info TEXT,
      created_at INTEGER NOT NULL
    )`
  yield* sql`
    CREATE TABLE events (
      seq INTEGER PRIMARY KEY AUTOINCREMENT,
      at INTEGER NOT NULL,
      type TEXT NOT NULL,
      rollout_id TEXT,
      attempt_id TEXT,
      data TEXT
    )`
})

/**
 * Every call record is written on the response path, and each index on `calls` is one more page
 * in each commit. Calls of a rollout are found through its attempts (`attempts (rollout_id, idx)`
 * then `calls (attempt_id, seq)`), which also gives their order, so this index only cost writes.
 */
const m0002_drop_calls_by_rollout = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DROP INDEX IF EXISTS calls_by_rollout`
})

/**
 * Each call records the wire protocol it spoke (OpenAI or Anthropic). Every call recorded before
 * came by an OpenAI route, so that is what the existing rows get.
 */
const m0003_calls_protocol = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE calls ADD COLUMN protocol TEXT NOT NULL DEFAULT 'openai'`
})

/**
 * What each update trained of each call: its advantage and per-token loss weight, so the
 * dashboard's token view can show them. Keyed by call and the version the update produced.
 */
const m0004_trained_calls = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE trained_calls (
      call_id TEXT NOT NULL REFERENCES calls (id),
      rollout_id TEXT NOT NULL REFERENCES rollouts (id),
      version INTEGER NOT NULL,
      advantage REAL NOT NULL,
      weight REAL NOT NULL,
      tokens INTEGER NOT NULL,
      PRIMARY KEY (call_id, version)
    )`
  yield* sql`CREATE INDEX trained_calls_by_rollout ON trained_calls (rollout_id, version)`
})

export const migrations = {
  "0001_init": m0001_init,
  "0002_drop_calls_by_rollout": m0002_drop_calls_by_rollout,
  "0003_calls_protocol": m0003_calls_protocol,
  "0004_trained_calls": m0004_trained_calls
}
