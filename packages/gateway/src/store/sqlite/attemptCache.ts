/**
 * Attempts by key and by id, so that the attempt of a call is not looked up (and its key not
 * hashed) in SQLite on every call. The store is the only writer of its file: every state change
 * goes through `transition`, which refreshes the cached attempt after it commits.
 */
import type { Attempt } from "@reins/protocol"

/** How many attempts (and keys) the store keeps in memory; more are read from SQLite. */
const ATTEMPT_CACHE = 10_000

export const makeAttemptCache = (capacity = ATTEMPT_CACHE) => {
  const byKey = new Map<string, string>()
  const byId = new Map<string, Attempt>()
  const bounded = <K, V>(m: Map<K, V>, k: K, v: V) => {
    m.set(k, v)
    if (m.size > capacity) m.delete(m.keys().next().value!)
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
}
