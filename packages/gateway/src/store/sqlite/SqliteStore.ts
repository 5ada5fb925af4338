/**
 * The embedded store: one SQLite file in WAL mode with `synchronous = NORMAL` (a committed
 * transaction survives a kill -9 of the process; only an OS crash can lose the last commits).
 * Each write is one transaction; its events are published to live subscribers after commit.
 * Call records are group-committed (groupCommit.ts). The schema is managed by @effect/sql
 * migrations (see migrations.ts); the statements are in statements.ts.
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
  type ModelVersion,
  NotFound,
  protocolOfEndpoint,
  PromptReuse,
  type Reward,
  StoreError,
  StoreEvent
} from "@reins/protocol"
import { Chunk, Effect, Layer, Option, PubSub, Ref, type Scope, Stream } from "effect"
import { mkdirSync } from "node:fs"
import path from "node:path"
import { generateKey, hashKey } from "../../auth/keys.js"
import { newId } from "../ids.js"
import { assertLittleEndian, toBlob } from "../packed.js"
import { type IssuedAttempt, type NewCall, type RolloutDetail, Store, type StoreService } from "../Store.js"
import { makeAttemptCache } from "./attemptCache.js"
import { startCheckpointer } from "./checkpointer.js"
import { makeGroupCommit } from "./groupCommit.js"
import { migrations } from "./migrations.js"
import { registerVersionFunctions, rolloutPage, rolloutSummaries } from "./rolloutQueries.js"
import { json, parseJson, type Row, toAttempt, toCall, toEvent, toModelVersion, toReward, toRollout, toTrainedCall } from "./rows.js"
import { EVENT_PAGE, prepareStatements, row, rows } from "./statements.js"

const versionRange = (versions: Int32Array): { readonly minVersion: number | null; readonly maxVersion: number | null } => {
  if (versions.length === 0) return { minVersion: null, maxVersion: null }
  let min = versions[0]!
  let max = min
  for (const v of versions) (min = v < min ? v : min), (max = v > max ? v : max)
  return { minVersion: min, maxVersion: max }
}

const nullable = <A>(u: A | undefined): A | null => (u === undefined ? null : u)

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

/** The store on an open database. */
const makeService = (db: Database.Database, published: PubSub.PubSub<StoreEvent>): StoreService => {
  const st = prepareStatements(db)
  const inTransaction = db.transaction((f: () => unknown) => f()) as <A>(f: () => A) => A
  const fail = (e: unknown) => new StoreError({ message: e instanceof Error ? e.message : String(e) })

  /**
   * Runs `body` in one transaction with an `Emit` that inserts each event in it and collects it
   * for publishing; throws when the transaction aborted. An event is built from what was
   * inserted (not read back): every call records one.
   */
  const transact = <A>(body: (emit: Emit) => A) => {
    const events: Array<StoreEvent> = []
    const emit: Emit = (type, ids, data) => {
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
    return { result: inTransaction(() => body(emit)), events }
  }

  /** Runs `body` in one transaction; its events are published once it has committed. */
  const write = <A>(body: (emit: Emit) => A): Effect.Effect<A, StoreError | Expected> =>
    Effect.suspend(() => {
      try {
        const { events, result } = transact(body)
        return Effect.as(PubSub.publishAll(published, events), result)
      } catch (e) {
        return Effect.fail(isExpected(e) ? e : fail(e))
      }
    })

  const read = <A>(f: () => A): Effect.Effect<A, StoreError> => Effect.try({ try: f, catch: fail })

  const cache = makeAttemptCache()

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
      outputTokens: call.outputIds.length,
      // The policy versions that sampled it: what the dashboard's staleness chart needs, without reading the call.
      ...versionRange(call.versions)
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

  /** A rollout with its attempts, rewards and the calls `calls` reads. */
  const detail = (id: string, calls: typeof st.callsOfRollout): Effect.Effect<RolloutDetail, StoreError | NotFound> =>
    Effect.flatMap(
      read(() => {
        const r = row(st.rollout, id)
        if (r === undefined) return undefined
        return {
          rollout: toRollout(r),
          attempts: rows(st.attemptsOfRollout, id).map(toAttempt),
          calls: rows(calls, id).map(toCall),
          rewards: rows(st.rewardsOfRollout, id).map(toReward)
        }
      }),
      (d) => found(d, notFound("rollout", id))
    )

  const commitCall = makeGroupCommit({ transact, write: insertCall, published, fail })

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

    recordCall: commitCall,

    call: (id) => Effect.flatMap(read(() => row(st.call, id)), (r) => Effect.map(found(r, notFound("call", id)), toCall)),

    calls: (attemptId, afterSeq = 0) => read(() => rows(st.callsOfAttempt, attemptId, afterSeq).map(toCall)),

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

    rollout: (id) => detail(id, st.callsOfRollout),

    rolloutTrace: (id) => detail(id, st.traceCallsOfRollout),

    finalReward: (rolloutId, attemptId) => read(() => (row(st.finalRewardOfAttempt, rolloutId, attemptId)?.value as number | undefined) ?? null),

    unfinished: read(() => rows(st.unfinished).map((r) => ({ attempt: toAttempt(r), task: parseJson(r.task), group: r.grp }))),

    rollouts: (query) => read(() => rolloutPage(db, query)),

    rolloutSummaries: (ids) => read(() => rolloutSummaries(db, ids)),

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

    recordTrained: (calls) =>
      write(() => {
        for (const c of calls) st.insertTrained.run(c.callId, c.rolloutId, c.version, c.advantage, c.weight, c.tokens)
      }) as Effect.Effect<void, StoreError>,

    trainedCalls: (rolloutId) => read(() => rows(st.trainedOfRollout, rolloutId).map(toTrainedCall)),

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
          registerVersionFunctions(db)
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
