/**
 * The cluster secret every connection authenticates with (see Handshake.ts). Where it comes from,
 * first match wins:
 *
 * 1. `--secret-file FILE` (the whole file, trimmed);
 * 2. the `REINS_CLUSTER_SECRET` environment variable;
 * 3. `<data dir>/cluster-secret`, which a node generates (32 random bytes, hex, mode 0600) on its
 *    first start when none of the above is given. Other nodes then join with
 *    `--secret-file <that file>` (or the variable set to its content).
 */
import { Effect, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs"
import path from "node:path"
import { NodeStartError } from "../errors.js"

export const ENV = "REINS_CLUSTER_SECRET"
export const FILE_NAME = "cluster-secret"
const MIN_LENGTH = 16

export interface ClusterSecret {
  readonly secret: Redacted.Redacted<string>
  readonly source: "file" | "env" | "data-dir" | "generated" | "config"
  /** The file it was read from or written to. */
  readonly path?: string
}

const check = (value: string, where: string) =>
  value.length >= MIN_LENGTH
    ? Effect.succeed(Redacted.make(value))
    : Effect.fail(new NodeStartError({ detail: `the cluster secret in ${where} is too short (at least ${MIN_LENGTH} characters)` }))

const readFile = (file: string) =>
  Effect.try({
    try: () => readFileSync(file, "utf8").trim(),
    catch: (error) => new NodeStartError({ detail: `cannot read the cluster secret file ${file}: ${(error as Error).message}` })
  })

/** Warns when the secret file can be read by other users. */
const warnIfOpen = (file: string) =>
  Effect.suspend(() => {
    try {
      return (statSync(file).mode & 0o077) !== 0
        ? Effect.logWarning(`${file} is readable by other users; chmod 600 it`)
        : Effect.void
    } catch {
      return Effect.void
    }
  })

export const load = (options: {
  readonly secretFile?: string | undefined
  readonly dataDir: string
  /** Nodes generate a secret when none is configured; tools (`reins status`) do not. */
  readonly generate: boolean
}): Effect.Effect<ClusterSecret, NodeStartError> =>
  Effect.gen(function*() {
    if (options.secretFile !== undefined) {
      const file = path.resolve(options.secretFile)
      const secret = yield* Effect.flatMap(readFile(file), (v) => check(v, file))
      yield* warnIfOpen(file)
      return { secret, source: "file", path: file } as const
    }
    const env = process.env[ENV]
    if (env !== undefined && env !== "") return { secret: yield* check(env.trim(), ENV), source: "env" } as const
    const file = path.resolve(options.dataDir, FILE_NAME)
    if (existsSync(file)) {
      const secret = yield* Effect.flatMap(readFile(file), (v) => check(v, file))
      return { secret, source: "data-dir", path: file } as const
    }
    if (!options.generate) {
      return yield* new NodeStartError({
        detail: `no cluster secret: pass --secret-file FILE or set ${ENV} (a node started without one writes ${FILE_NAME} in its data directory)`
      })
    }
    const value = randomBytes(32).toString("hex")
    yield* Effect.try({
      try: () => writeFileSync(file, `${value}\n`, { mode: 0o600, flag: "wx" }),
      catch: (error) => new NodeStartError({ detail: `cannot write ${file}: ${(error as Error).message}` })
    })
    return { secret: Redacted.make(value), source: "generated", path: file } as const
  })
