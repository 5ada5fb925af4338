/** What the HTTP routes need: the call environment plus HTTP-level settings. */
import type { Effect } from "effect"
import type { SessionAccess } from "../../auth/admin.js"
import type { SessionCheck } from "../../auth/session.js"
import type { AttemptLogs } from "../../dashboard/attemptLogs.js"
import type { ClusterJson } from "../../dashboard/cluster.js"
import type { CallEnv } from "../../calls/env.js"
import type { ApiError } from "../errors.js"

export interface HttpConfig {
  /** Larger bodies get a 413. */
  readonly maxBodyBytes: number
  /** Other names clients may use for the served model. */
  readonly modelAliases: ReadonlyArray<string>
  /** The agent-facing base URL handed out with new attempts (default: derived from the request's Host). */
  readonly publicUrl: string | undefined
}

export interface AppEnv extends CallEnv {
  readonly config: HttpConfig
  /** The admin token as a header, or a dashboard session cookie within `access` (default `read`). */
  readonly checkAdmin: (headers: Readonly<Record<string, string | undefined>>, access?: SessionAccess) => Effect.Effect<void, ApiError>
  /** The cluster's nodes and launchers as this Gateway's node sees them (empty without an actor system). */
  readonly cluster: Effect.Effect<ClusterJson>
  /** An attempt's captured logs, from the launcher in the cluster that ran it. */
  readonly attemptLogs: (attemptId: string) => Effect.Effect<AttemptLogs>
  /** Dashboard logins: a session cookie value for the right admin token (null for a wrong one), and the check of a request's cookie. */
  readonly sessions: {
    readonly open: (given: string) => string | null
    readonly check: (headers: Readonly<Record<string, string | undefined>>) => SessionCheck
  }
}
