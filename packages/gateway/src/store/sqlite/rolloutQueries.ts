/**
 * The dashboard's reads of the rollouts table: one filtered, cursor-paged page (newest first), and
 * the summaries of a page's rollouts. Both stay fast over tens of thousands of rollouts: a page
 * walks the primary key (or the state/group index) from the cursor and stops after `limit` rows;
 * summaries read only the page's calls, through `attempts (rollout_id, idx)` and
 * `calls (attempt_id, seq)`, and decode no token arrays in JavaScript.
 */
import type Database from "better-sqlite3"
import { int32FromBlob } from "../packed.js"
import type { RolloutPage, RolloutQuery, RolloutSummary } from "../Store.js"
import { type Row, toRollout } from "./rows.js"

/** Versions are stored as packed little-endian int32 (see packed.ts). */
const versionsOf = (blob: unknown): Int32Array => int32FromBlob(blob as Uint8Array | null)

/** The smallest or largest version of a call (null when it has none), by `pick`. */
const versionBound = (pick: (a: number, b: number) => number) => (blob: unknown) => {
  const vs = versionsOf(blob)
  return vs.length === 0 ? null : vs.reduce((a, b) => pick(a, b))
}

/**
 * SQL functions over a call's `versions` column, so that filters and summaries run inside
 * SQLite: `reins_has_version(versions, v)`, `reins_min_version(versions)`, `reins_max_version(versions)`.
 */
export const registerVersionFunctions = (db: Database.Database): void => {
  db.function("reins_has_version", { deterministic: true }, (blob: unknown, v: unknown) => (versionsOf(blob).includes(Number(v)) ? 1 : 0))
  db.function("reins_min_version", { deterministic: true }, versionBound(Math.min))
  db.function("reins_max_version", { deterministic: true }, versionBound(Math.max))
}

const HAS_VERSION = `EXISTS (SELECT 1 FROM attempts CROSS JOIN calls ON calls.attempt_id = attempts.id
  WHERE attempts.rollout_id = rollouts.id AND reins_has_version(calls.versions, ?))`

export const rolloutPage = (db: Database.Database, query: RolloutQuery): RolloutPage => {
  const limit = Math.min(500, Math.max(1, Math.floor(query.limit ?? 50)))
  const where: Array<string> = []
  const params: Array<unknown> = []
  const add = (clause: string, value: unknown) => (where.push(clause), params.push(value))
  if (query.state) add("state = ?", query.state)
  if (query.group !== undefined) add("grp = ?", query.group)
  if (query.cursor) add("id < ?", query.cursor)
  if (query.minReward !== undefined) add("reward >= ?", query.minReward)
  if (query.maxReward !== undefined) add("reward <= ?", query.maxReward)
  if (query.version !== undefined) add(HAS_VERSION, query.version)
  const sql = `SELECT * FROM rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT ?`
  const found = db.prepare(sql).all(...params, limit + 1) as Array<Row>
  const page = found.slice(0, limit).map(toRollout)
  return { rollouts: page, next: found.length > limit ? page[page.length - 1]!.id : null }
}

export const rolloutSummaries = (db: Database.Database, ids: ReadonlyArray<string>): ReadonlyArray<RolloutSummary> => {
  if (ids.length === 0) return []
  const sql = `SELECT attempts.rollout_id AS rollout_id, COUNT(calls.id) AS calls,
      COALESCE(SUM(length(calls.prompt_ids)), 0) / 4 AS prompt_tokens, COALESCE(SUM(length(calls.output_ids)), 0) / 4 AS output_tokens,
      MIN(reins_min_version(calls.versions)) AS min_version, MAX(reins_max_version(calls.versions)) AS max_version
    FROM attempts CROSS JOIN calls ON calls.attempt_id = attempts.id
    WHERE attempts.rollout_id IN (${ids.map(() => "?").join(", ")})
    GROUP BY attempts.rollout_id`
  return (db.prepare(sql).all(...ids) as Array<Row>).map((r) => ({
    rolloutId: r.rollout_id,
    calls: r.calls,
    promptTokens: r.prompt_tokens,
    outputTokens: r.output_tokens,
    minVersion: r.min_version,
    maxVersion: r.max_version
  }))
}
