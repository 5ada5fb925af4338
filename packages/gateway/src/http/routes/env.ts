/** What the HTTP routes need: the call environment plus HTTP-level settings. */
import type { Effect } from "effect"
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
  readonly checkAdmin: (headers: Readonly<Record<string, string | undefined>>) => Effect.Effect<void, ApiError>
}
