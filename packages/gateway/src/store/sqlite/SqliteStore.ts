/**
 * The embedded store: one SQLite file in WAL mode with `synchronous = NORMAL` (a committed
 * transaction survives a kill -9 of the process; only an OS crash can lose the last commits).
 * Each write is one transaction; its events are published to live subscribers after commit.
 * The schema is managed by @effect/sql migrations (see migrations.ts).
 */
import { Migrator } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import Database from "better-sqlite3"
import {
  Attempt,
  type AttemptState,
  AttemptTransitions,
  type CallStatus,
  CallTimings,
  Conflict,
  type EventType,
  IllegalTransition,
  LlmCall,
  ModelVersion,
  NotFound,
  protocolOfEndpoint,
  PromptReuse,
  Reward,
  Rollout,
  StoreError,
  StoreEvent
} from "@reins/protocol"
import { Chunk, Effect, Layer, Option, PubSub, Ref, type Scope, Stream } from "effect"
import { mkdirSync } from "node:fs"
import { Worker } from "node:worker_threads"
import path from "node:path"
import { generateKey, hashKey } from "../../auth/keys.js"
import { newId } from "../ids.js"
import { assertLittleEndian, float32FromBlob, int32FromBlob, toBlob } from "../packed.js"
import { type IssuedAttempt, type NewCall, Store, type StoreService } from "../Store.js"
import { migrations } from "./migrations.js"

type Row = Record<string, any>

const json = (u: unknown): string | null => (u === undefined || u === null ? null : JSON.stringify(u))
const parseJson = (s: unknown): unknown => (typeof s === "string" ? JSON.parse(s) : null)
const nullable = <A>(u: A | undefined): A | null => (u === undefined ? null : u)

const toRollout = (r: Row) =>
  new Rollout({
    id: r.id,
    task: parseJson(r.task),
    group: r.grp,
    state: r.state,
    attempts: r.attempts,
    reward: r.reward,
    createdAt: r.created_at,
    updatedAt: r.updated_at
  }, true)

const toAttempt = (r: Row) =>
  new Attempt({
    id: r.id,
    rolloutId: r.rollout_id,
    index: r.idx,
    state: r.state,
    reason: r.reason,
    createdAt: r.created_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at
  }, true)

const toCall = (r: Row) =>
  new LlmCall({
    id: r.id,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    seq: r.seq,
    endpoint: r.endpoint,
    protocol: r.protocol,
    model: r.model,
    status: r.status,
    error: r.error,
    request: parseJson(r.request),
    response: parseJson(r.response),
    promptIds: int32FromBlob(r.prompt_ids),
    outputIds: int32FromBlob(r.output_ids),
    logprobs: float32FromBlob(r.logprobs),
    versions: int32FromBlob(r.versions),
    finishReason: r.finish_reason,
    trainable: r.trainable === 1,
    reuse: new PromptReuse({ reusedTokens: r.reused_tokens, fromCallId: r.reuse_from, break: r.break_reason }, true),
    timings: new CallTimings({
      receivedAt: r.received_at,
      startedAt: r.started_at,
      firstTokenAt: r.first_token_at,
      finishedAt: r.finished_at,
      heldMs: r.held_ms
    }, true)
  }, true)

const toReward = (r: Row) =>
  new Reward({
    id: r.id,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    callId: r.call_id,
    value: r.value,
    info: parseJson(r.info),
    createdAt: r.created_at
  }, true)

const toModelVersion = (r: Row) =>
  new ModelVersion({ version: r.version, modelId: r.model_id, info: parseJson(r.info), createdAt: r.created_at }, true)

const toEvent = (r: Row) =>
  new StoreEvent({
    seq: r.seq,
    at: r.at,
    type: r.type,
    rolloutId: r.rollout_id,
    attemptId: r.attempt_id,
    data: parseJson(r.data)
  }, true)

const EVENT_PAGE = 1000

/** How many attempts (and keys) the store keeps in memory; more are read from SQLite. */
const ATTEMPT_CACHE = 10_000

/** Thrown inside a transaction to abort it with a typed failure. */
type Expected = NotFound | IllegalTransition | Conflict
const isExpected = (e: unknown): e is Expected => e instanceof NotFound || e instanceof IllegalTransition || e instanceof Conflict

type Emit = (type: EventType, ids: { readonly rolloutId?: string | null; readonly attemptId?: string | null }, data: unknown) => StoreEvent

/** Applies the migrations with @effect/sql's Migrator (its own short-lived connection). */
const migrate = (filename: string) =>
  Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: "reins_migrations" }).pipe(
    Effect.provide(SqliteClient.layer({ filename })),
    Effect.mapError((e) => new StoreError({ message: `migrating ${filename} failed: ${e.message}` })),
    Effect.asVoid
  )

/**
 * The store on an open database. Statements run synchronously on better-sqlite3 (prepared once):
 * measured ~10× less overhead per statement than going through an SqlClient, which matters
 * because a call's record is written on the response path.
 */
const makeService = (db: Database.Database, published: PubSub.PubSub<StoreEvent>): StoreService => {
  const q = (sql: string) => db.prepare(sql)
  const st = {
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
    nextSeq: q(`SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM calls WHERE attempt_id = ?`),
    insertCall: q(`INSERT INTO calls (id, attempt_id, rollout_id, seq, endpoint, protocol, model, status, error, request, response,
                   prompt_ids, output_ids, logprobs, versions, finish_reason, trainable, reused_tokens, reuse_from,
                   break_reason, received_at, started_at, first_token_at, finished_at, held_ms)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    call: q(`SELECT * FROM calls WHERE id = ?`),
    callOfAttempt: q(`SELECT id FROM calls WHERE id = ? AND attempt_id = ?`),
    callsOfAttempt: q(`SELECT * FROM calls WHERE attempt_id = ? ORDER BY seq`),
    // Attempts in order, then each one's calls by the (attempt_id, seq) index: no sort, no scan.
    callsOfRollout: q(`SELECT calls.* FROM attempts CROSS JOIN calls ON calls.attempt_id = attempts.id WHERE attempts.rollout_id = ? ORDER BY attempts.idx, calls.seq`),
    attemptsOfRollout: q(`SELECT * FROM attempts WHERE rollout_id = ? ORDER BY idx`),
    insertReward: q(`INSERT INTO rewards (id, rollout_id, attempt_id, call_id, value, info, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *`),
    finalReward: q(`UPDATE rollouts SET reward = ?, updated_at = ? WHERE id = ?`),
    // Cancelled rollouts' calls are dropped on purpose (a stopped harness's last call may fail).
    failedCalls: q(`SELECT calls.status, calls.error FROM calls JOIN rollouts ON rollouts.id = calls.rollout_id WHERE calls.status != 200 AND rollouts.state != 'cancelled'`),
    rewardsOfRollout: q(`SELECT * FROM rewards WHERE rollout_id = ? ORDER BY id`),
    modelVersion: q(`SELECT * FROM model_versions WHERE version = ?`),
    insertModelVersion: q(`INSERT INTO model_versions (version, model_id, info, created_at) VALUES (?, ?, ?, ?) RETURNING *`),
    modelVersions: q(`SELECT * FROM model_versions ORDER BY version`),
    eventsAfter: q(`SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ${EVENT_PAGE}`)
  }
  const row = (s: Database.Statement, ...params: ReadonlyArray<unknown>) => s.get(...params) as Row | undefined
  const rows = (s: Database.Statement, ...params: ReadonlyArray<unknown>) => s.all(...params) as Array<Row>

  const inTransaction = db.transaction((f: () => unknown) => f()) as <A>(f: () => A) => A
  const fail = (e: unknown) => new StoreError({ message: e instanceof Error ? e.message : String(e) })

  /**
   * An `Emit` that inserts each event in the current transaction and collects it for publishing.
   * The event is built from what was inserted (not read back): every call records one.
   */
  const emitInto = (events: Array<StoreEvent>): Emit => (type, ids, data) => {
    const at = Date.now()
    const text = json(data)
    const { lastInsertRowid } = st.insertEvent.run(at, type, ids.rolloutId ?? null, ids.attemptId ?? null, text)
    const e = new StoreEvent({
      seq: Number(lastInsertRowid),
      at,
      type,
      rolloutId: ids.rolloutId ?? null,
      attemptId: ids.attemptId ?? null,
      data: text === null ? null : data
    }, true)
    events.push(e)
    return e
  }

  /**
   * Attempts by key and by id, so that the attempt of a call is not looked up (and its key not
   * hashed) in SQLite on every call. This store is the only writer of its file: every state
   * change goes through `transition`, which refreshes the cached attempt after it commits.
   */
  const cache = (() => {
    const byKey = new Map<string, string>()
    const byId = new Map<string, Attempt>()
    const bounded = <K, V>(m: Map<K, V>, k: K, v: V) => {
      m.set(k, v)
      if (m.size > ATTEMPT_CACHE) m.delete(m.keys().next().value!)
    }
    return {
      byKey: (key: string): Attempt | undefined => {
        const id = byKey.get(key)
        return id === undefined ? undefined : byId.get(id)
      },
      byId: (id: string): Attempt | undefined => byId.get(id),
      remember: (attempt: Attempt, key?: string) => {
        if (key !== undefined) bounded(byKey, key, attempt.id)
        bounded(byId, attempt.id, attempt)
      },
      /** Keeps a cached attempt current (attempts not cached are read from SQLite when needed). */
      update: (attempt: Attempt) => {
        if (byId.has(attempt.id)) byId.set(attempt.id, attempt)
      }
    }
  })()

  /** Runs `body` in one transaction; its events are published once it has committed. */
  const write = <A>(body: (emit: Emit) => A): Effect.Effect<A, StoreError | Expected> =>
    Effect.suspend(() => {
      const events: Array<StoreEvent> = []
      const emit = emitInto(events)
      try {
        const result = inTransaction(() => body(emit))
        return Effect.as(PubSub.publishAll(published, events), result)
      } catch (e) {
        return Effect.fail(isExpected(e) ? e : fail(e))
      }
    })

  const read = <A>(f: () => A): Effect.Effect<A, StoreError> => Effect.try({ try: f, catch: fail })

  /**
   * Group commit for call records: the calls recorded in one turn of the event loop share one
   * transaction (one WAL append instead of one per call), and each caller resumes after it.
   */
  const commits = (() => {
    let queue: Array<{ readonly call: NewCall; readonly resume: (e: Effect.Effect<LlmCall, StoreError | NotFound>) => void }> = []
    const flush = () => {
      const batch = queue
      queue = []
      const results: Array<LlmCall | NotFound> = []
      const events: Array<StoreEvent> = []
      const emit = emitInto(events)
      try {
        inTransaction(() => {
          for (const item of batch) {
            try {
              results.push(insertCall(item.call, emit))
            } catch (e) {
              // Only the attempt check throws before writing; anything else aborts the batch.
              if (e instanceof NotFound) results.push(e)
              else throw e
            }
          }
        })
      } catch (e) {
        const failure = Effect.fail(fail(e))
        for (const item of batch) item.resume(failure)
        return
      }
      // The hub is unbounded, so offering never waits: no fiber needed to publish.
      for (const e of events) published.unsafeOffer(e)
      batch.forEach((item, i) => {
        const r = results[i]!
        item.resume(r instanceof NotFound ? Effect.fail(r) : Effect.succeed(r))
      })
    }
    return {
      add: (call: NewCall, resume: (e: Effect.Effect<LlmCall, StoreError | NotFound>) => void) => {
        queue.push({ call, resume })
        if (queue.length === 1) setImmediate(flush)
      }
    }
  })()

  const issueAttempt = (rollout: Row, index: number, start: boolean, emit: Emit): IssuedAttempt => {
    const now = Date.now()
    const key = generateKey()
    const id = newId("at")
    const state: AttemptState = start ? "running" : "queued"
    st.insertAttempt.run(id, rollout.id, index, hashKey(key), state, now, start ? now : null)
    const updated = row(st.rolloutAttemptsUpdate, index + 1, state, now, rollout.id)!
    emit("attempt.created", { rolloutId: rollout.id, attemptId: id }, { index, state })
    const attempt = new Attempt({ id, rolloutId: rollout.id, index, state, reason: null, createdAt: now, startedAt: start ? now : null, finishedAt: null }, true)
    return { rollout: toRollout(updated), attempt, key }
  }

  /** The rollout of an attempt (attempts are never deleted, so a cached one exists). */
  const rolloutOfAttempt = (attemptId: string): string => {
    const cached = cache.byId(attemptId)
    if (cached !== undefined) return cached.rolloutId
    const attempt = row(st.attempt, attemptId)
    if (attempt === undefined) throw new NotFound({ entity: "attempt", id: attemptId })
    return attempt.rollout_id
  }

  const insertCall = (call: NewCall, emit: Emit): LlmCall => {
    const rolloutId = rolloutOfAttempt(call.attemptId)
    const seq = row(st.nextSeq, call.attemptId)!.seq as number
    const id = newId("call")
    const protocol = call.protocol ?? protocolOfEndpoint(call.endpoint)
    const t = call.timings
    st.insertCall.run(
      id, call.attemptId, rolloutId, seq, call.endpoint, protocol, call.model, call.status, call.error,
      call.requestJson ?? json(call.request), call.responseJson ?? json(call.response),
      toBlob(call.promptIds), toBlob(call.outputIds), toBlob(call.logprobs), toBlob(call.versions),
      call.finishReason, call.trainable ? 1 : 0, call.reuse.reusedTokens, call.reuse.fromCallId, call.reuse.break,
      t.receivedAt, t.startedAt, t.firstTokenAt, t.finishedAt, t.heldMs
    )
    emit("call.recorded", { rolloutId, attemptId: call.attemptId }, {
      callId: id,
      seq,
      status: call.status,
      finishReason: call.finishReason,
      promptTokens: call.promptIds.length,
      outputTokens: call.outputIds.length
    })
    return new LlmCall({
      id,
      rolloutId,
      attemptId: call.attemptId,
      seq,
      endpoint: call.endpoint,
      protocol,
      model: call.model,
      status: call.status,
      error: call.error,
      request: nullable(call.request),
      response: nullable(call.response),
      promptIds: call.promptIds,
      outputIds: call.outputIds,
      logprobs: call.logprobs,
      versions: call.versions,
      finishReason: call.finishReason,
      trainable: call.trainable,
      reuse: new PromptReuse(call.reuse, true),
      timings: new CallTimings(t, true)
    }, true)
  }

  const notFound = (entity: string, id: string) => () => new NotFound({ entity, id })
  const found = <A>(value: A | undefined, missing: () => NotFound): Effect.Effect<A, NotFound> =>
    value === undefined ? Effect.fail(missing()) : Effect.succeed(value)

  return {
    createRollout: (input) =>
      write((emit) => {
        const now = Date.now()
        const id = newId("ro")
        const rollout = row(st.insertRollout, id, JSON.stringify(input.task ?? null), input.group ?? null, now, now)!
        emit("rollout.created", { rolloutId: id }, { group: input.group ?? null })
        return issueAttempt(rollout, 0, input.start ?? false, emit)
      }) as Effect.Effect<IssuedAttempt, StoreError>,

    createAttempt: (rolloutId, options) =>
      write((emit) => {
        const rollout = row(st.rollout, rolloutId)
        if (rollout === undefined) throw new NotFound({ entity: "rollout", id: rolloutId })
        const live = rows(st.liveAttempts, rolloutId)
        if (live.length > 0) throw new Conflict({ message: `rollout ${rolloutId} still has a live attempt (${live[0]!.id} is ${live[0]!.state})` })
        return issueAttempt(rollout, rollout.attempts, options?.start ?? false, emit)
      }) as Effect.Effect<IssuedAttempt, StoreError | NotFound | Conflict>,

    attemptByKey: (key) =>
      read(() => {
        const cached = cache.byKey(key)
        if (cached !== undefined) return Option.some(cached)
        const r = row(st.attemptByHash, hashKey(key))
        if (r === undefined) return Option.none()
        const attempt = toAttempt(r)
        cache.remember(attempt, key)
        return Option.some(attempt)
      }),

    attempt: (id) => Effect.flatMap(read(() => row(st.attempt, id)), (r) => Effect.map(found(r, notFound("attempt", id)), toAttempt)),

    transition: (attemptId, to, reason) =>
      write((emit) => {
        const current = row(st.attempt, attemptId)
        if (current === undefined) throw new NotFound({ entity: "attempt", id: attemptId })
        const from = current.state as AttemptState
        if (!AttemptTransitions[from].includes(to)) throw new IllegalTransition({ attemptId, from, to })
        const now = Date.now()
        const terminal = AttemptTransitions[to].length === 0
        const updated = row(st.updateAttempt, to, reason ?? null, to === "running" ? now : null, terminal ? now : null, attemptId)!
        // The rollout mirrors its latest attempt.
        st.mirrorState.run(to, now, current.rollout_id, current.idx + 1)
        emit("attempt.state", { rolloutId: current.rollout_id, attemptId }, { from, to, reason: reason ?? null })
        return toAttempt(updated)
      }).pipe(Effect.tap((attempt) => Effect.sync(() => cache.update(attempt)))) as Effect.Effect<Attempt, StoreError | NotFound | IllegalTransition>,

    recordCall: (call) => Effect.async<LlmCall, StoreError | NotFound>((resume) => void commits.add(call, resume)),

    call: (id) => Effect.flatMap(read(() => row(st.call, id)), (r) => Effect.map(found(r, notFound("call", id)), toCall)),

    calls: (attemptId) => read(() => rows(st.callsOfAttempt, attemptId).map(toCall)),

    addReward: (reward) =>
      write((emit) => {
        const attempt = row(st.attempt, reward.attemptId)
        if (attempt === undefined) throw new NotFound({ entity: "attempt", id: reward.attemptId })
        const callId = reward.callId ?? null
        if (callId !== null && row(st.callOfAttempt, callId, reward.attemptId) === undefined) throw new NotFound({ entity: "call", id: callId })
        const now = Date.now()
        const id = newId("rw")
        const saved = row(st.insertReward, id, attempt.rollout_id, reward.attemptId, callId, reward.value, json(reward.info), now)!
        if (callId === null) st.finalReward.run(reward.value, now, attempt.rollout_id)
        emit("reward.recorded", { rolloutId: attempt.rollout_id, attemptId: reward.attemptId }, { rewardId: id, callId, value: reward.value })
        return toReward(saved)
      }) as Effect.Effect<Reward, StoreError | NotFound>,

    rollout: (id) =>
      Effect.flatMap(
        read(() => {
          const r = row(st.rollout, id)
          if (r === undefined) return undefined
          return {
            rollout: toRollout(r),
            attempts: rows(st.attemptsOfRollout, id).map(toAttempt),
            calls: rows(st.callsOfRollout, id).map(toCall),
            rewards: rows(st.rewardsOfRollout, id).map(toReward)
          }
        }),
        (d) => found(d, notFound("rollout", id))
      ),

    rollouts: (query) =>
      read(() => {
        const limit = Math.min(500, Math.max(1, Math.floor(query.limit ?? 50)))
        const where: Array<string> = []
        const params: Array<unknown> = []
        if (query.state) (where.push("state = ?"), params.push(query.state))
        if (query.group !== undefined) (where.push("grp = ?"), params.push(query.group))
        if (query.cursor) (where.push("id < ?"), params.push(query.cursor))
        const sql = `SELECT * FROM rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT ?`
        const found = rows(db.prepare(sql), ...params, limit + 1)
        const page = found.slice(0, limit).map(toRollout)
        return { rollouts: page, next: found.length > limit ? page[page.length - 1]!.id : null }
      }),

    failedCalls: read(() => rows(st.failedCalls).map((r): CallStatus => ({ status: r.status, error: r.error }))),

    recordModelVersion: (v) =>
      write((emit) => {
        const existing = row(st.modelVersion, v.version)
        if (existing) return toModelVersion(existing)
        const saved = row(st.insertModelVersion, v.version, v.modelId, json(v.info), Date.now())!
        emit("model.version", {}, { version: v.version, modelId: v.modelId })
        return toModelVersion(saved)
      }) as Effect.Effect<ModelVersion, StoreError>,

    modelVersions: read(() => rows(st.modelVersions).map(toModelVersion)),

    recordEvent: (type, data) => write((emit) => emit(type, {}, data)) as Effect.Effect<StoreEvent, StoreError>,

    events: (after) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          // Subscribe before reading the log so that nothing falls between the two.
          const live = yield* PubSub.subscribe(published)
          const last = yield* Ref.make(after)
          const logged = Stream.paginateChunkEffect(after, (from) =>
            read(() => rows(st.eventsAfter, from).map(toEvent)).pipe(
              Effect.map((events) => [
                Chunk.unsafeFromArray(events),
                events.length < EVENT_PAGE ? Option.none() : Option.some(events[events.length - 1]!.seq)
              ] as const)
            )
          )
          const fresh = Stream.fromQueue(live).pipe(Stream.filterEffect((e) => Ref.get(last).pipe(Effect.map((seq) => e.seq > seq))))
          return Stream.concat(logged, fresh).pipe(Stream.tap((e) => Ref.set(last, e.seq)))
        })
      )
  }
}

const CHECKPOINT_INTERVAL_MS = 500

/**
 * Starts the WAL checkpointer thread; stops it (after a last checkpoint) with the scope. If it
 * cannot run, SQLite's own automatic checkpoints are turned back on.
 */
const startCheckpointer = (db: Database.Database, filename: string) =>
  Effect.acquireRelease(
    Effect.async<Worker | null>((resume) => {
      const fallback = (why: unknown) => {
        db.pragma("wal_autocheckpoint = 1000")
        resume(Effect.as(Effect.logWarning(`WAL checkpointer unavailable (${String(why)}); checkpointing inline`), null))
      }
      let worker: Worker
      try {
        worker = new Worker(new URL("./checkpointer.mjs", import.meta.url), { workerData: { filename, intervalMs: CHECKPOINT_INTERVAL_MS } })
      } catch (e) {
        return fallback(e)
      }
      const onError = (e: Error) => fallback(e)
      worker.once("error", onError)
      worker.once("message", (m: { ready?: boolean; error?: string }) => {
        worker.off("error", onError)
        if (!m.ready) return fallback(m.error)
        worker.on("error", (e) => Effect.runFork(Effect.logWarning(`WAL checkpointer failed: ${e.message}`)))
        worker.unref()
        resume(Effect.succeed(worker))
      })
    }),
    (worker) =>
      worker === null
        ? Effect.void
        : Effect.async<void>((resume) => {
            const done = () => resume(Effect.promise(() => worker.terminate()).pipe(Effect.asVoid))
            const timer = setTimeout(done, 5_000)
            worker.on("message", (m: { stopped?: boolean }) => {
              if (!m.stopped) return
              clearTimeout(timer)
              done()
            })
            worker.postMessage("stop")
          })
  )

/** Opens (creating and migrating if needed) the store in `filename`; closes it with the scope. */
export const make = (filename: string): Effect.Effect<StoreService, StoreError, Scope.Scope> =>
  Effect.gen(function* () {
    assertLittleEndian()
    yield* Effect.try({
      try: () => mkdirSync(path.dirname(path.resolve(filename)), { recursive: true }),
      catch: (e) => new StoreError({ message: `cannot create the data directory for ${filename}: ${String(e)}` })
    })
    yield* migrate(filename)
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const db = new Database(filename)
          db.pragma("journal_mode = WAL")
          // With WAL, NORMAL fsyncs at checkpoints only: a commit survives a kill -9 of the process.
          db.pragma("synchronous = NORMAL")
          db.pragma("foreign_keys = ON")
          db.pragma("busy_timeout = 5000")
          // Checkpoints run in a worker thread (see checkpointer.mjs), off the response path.
          db.pragma("wal_autocheckpoint = 0")
          return db
        },
        catch: (e) => new StoreError({ message: `cannot open the store ${filename}: ${String(e)}` })
      }),
      (db) => Effect.sync(() => db.open && db.close())
    )
    yield* startCheckpointer(db, filename)
    const published = yield* Effect.acquireRelease(PubSub.unbounded<StoreEvent>(), PubSub.shutdown)
    return makeService(db, published)
  })

export interface SqliteStoreOptions {
  /** The database file; its directory is created if missing. */
  readonly filename: string
}

/** `Store` on a SQLite file. */
export const layer = (options: SqliteStoreOptions): Layer.Layer<Store, StoreError> => Layer.scoped(Store, make(options.filename))
