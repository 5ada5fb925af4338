/**
 * Every statement of the embedded store, prepared once on its connection. They run
 * synchronously on better-sqlite3: measured ~10× less overhead per statement than going through
 * an SqlClient, which matters because a call's record is written on the response path.
 */
import type Database from "better-sqlite3"
import type { Row } from "./rows.js"

/** Events read from the log per query. */
export const EVENT_PAGE = 1000

/** A call's columns except its `request` and `response` bodies (the Trainer's read needs only tokens). */
const CALL_WITHOUT_BODIES = `calls.id, calls.attempt_id, calls.rollout_id, calls.seq, calls.endpoint, calls.protocol, calls.model,
  calls.status, calls.error, calls.prompt_ids, calls.output_ids, calls.logprobs, calls.versions, calls.finish_reason, calls.trainable,
  calls.reused_tokens, calls.reuse_from, calls.break_reason, calls.received_at, calls.started_at, calls.first_token_at,
  calls.finished_at, calls.held_ms`

export const prepareStatements = (db: Database.Database) => {
  const q = (sql: string) => db.prepare(sql)
  return {
    insertEvent: q(`INSERT INTO events (at, type, rollout_id, attempt_id, data) VALUES (?, ?, ?, ?, ?)`),
    insertRollout: q(`INSERT INTO rollouts (id, task, grp, state, attempts, created_at, updated_at) VALUES (?, ?, ?, 'queued', 0, ?, ?) RETURNING *`),
    rollout: q(`SELECT * FROM rollouts WHERE id = ?`),
    rolloutAttemptsUpdate: q(`UPDATE rollouts SET attempts = ?, state = ?, updated_at = ? WHERE id = ? RETURNING *`),
    insertAttempt: q(`INSERT INTO attempts (id, rollout_id, idx, key_hash, state, created_at, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
    liveAttempts: q(`SELECT id, state FROM attempts WHERE rollout_id = ? AND state IN ('queued', 'running')`),
    attemptByHash: q(`SELECT * FROM attempts WHERE key_hash = ?`),
    attempt: q(`SELECT * FROM attempts WHERE id = ?`),
    updateAttempt: q(`UPDATE attempts SET state = ?, reason = COALESCE(?, reason), started_at = COALESCE(started_at, ?), finished_at = ? WHERE id = ? RETURNING *`),
    mirrorState: q(`UPDATE rollouts SET state = ?, updated_at = ? WHERE id = ? AND attempts = ?`),
    // The rollout mirrors its latest attempt's state, so the state index finds them; the join takes
    // that attempt by (rollout_id, idx).
    unfinished: q(`SELECT attempts.*, rollouts.task, rollouts.grp
                   FROM rollouts JOIN attempts ON attempts.rollout_id = rollouts.id AND attempts.idx = rollouts.attempts - 1
                   WHERE rollouts.state IN ('queued', 'running') AND attempts.state IN ('queued', 'running')
                   ORDER BY rollouts.created_at, rollouts.id`),
    nextSeq: q(`SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM calls WHERE attempt_id = ?`),
    insertCall: q(`INSERT INTO calls (id, attempt_id, rollout_id, seq, endpoint, protocol, model, status, error, request, response,
                   prompt_ids, output_ids, logprobs, versions, finish_reason, trainable, reused_tokens, reuse_from,
                   break_reason, received_at, started_at, first_token_at, finished_at, held_ms)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    call: q(`SELECT * FROM calls WHERE id = ?`),
    callOfAttempt: q(`SELECT id FROM calls WHERE id = ? AND attempt_id = ?`),
    callsOfAttempt: q(`SELECT * FROM calls WHERE attempt_id = ? AND seq > ? ORDER BY seq`),
    // Attempts in order, then each one's calls by the (attempt_id, seq) index: no sort, no scan.
    callsOfRollout: q(`SELECT calls.* FROM attempts CROSS JOIN calls ON calls.attempt_id = attempts.id WHERE attempts.rollout_id = ? ORDER BY attempts.idx, calls.seq`),
    traceCallsOfRollout: q(`SELECT ${CALL_WITHOUT_BODIES} FROM attempts CROSS JOIN calls ON calls.attempt_id = attempts.id WHERE attempts.rollout_id = ? ORDER BY attempts.idx, calls.seq`),
    attemptsOfRollout: q(`SELECT * FROM attempts WHERE rollout_id = ? ORDER BY idx`),
    insertReward: q(`INSERT INTO rewards (id, rollout_id, attempt_id, call_id, value, info, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *`),
    finalReward: q(`UPDATE rollouts SET reward = ?, updated_at = ? WHERE id = ?`),
    // Reward ids sort by creation: the last final one of the attempt, by the (rollout_id, id) index.
    finalRewardOfAttempt: q(`SELECT value FROM rewards WHERE rollout_id = ? AND attempt_id = ? AND call_id IS NULL ORDER BY id DESC LIMIT 1`),
    // Cancelled rollouts' calls are dropped on purpose (a stopped harness's last call may fail).
    failedCalls: q(`SELECT calls.status, calls.error FROM calls JOIN rollouts ON rollouts.id = calls.rollout_id WHERE calls.status != 200 AND rollouts.state != 'cancelled'`),
    rewardsOfRollout: q(`SELECT * FROM rewards WHERE rollout_id = ? ORDER BY id`),
    modelVersion: q(`SELECT * FROM model_versions WHERE version = ?`),
    insertModelVersion: q(`INSERT INTO model_versions (version, model_id, info, created_at) VALUES (?, ?, ?, ?) RETURNING *`),
    modelVersions: q(`SELECT * FROM model_versions ORDER BY version`),
    insertTrained: q(`INSERT OR REPLACE INTO trained_calls (call_id, rollout_id, version, advantage, weight, tokens) VALUES (?, ?, ?, ?, ?, ?)`),
    trainedOfRollout: q(`SELECT * FROM trained_calls WHERE rollout_id = ? ORDER BY version, call_id`),
    eventsAfter: q(`SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ${EVENT_PAGE}`)
  }
}

export const row = (s: Database.Statement, ...params: ReadonlyArray<unknown>) => s.get(...params) as Row | undefined
export const rows = (s: Database.Statement, ...params: ReadonlyArray<unknown>) => s.all(...params) as Array<Row>
