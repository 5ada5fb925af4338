/**
 * An append-only JSONL file of Schema rows (the metrics log: one line per version).
 *
 * Each row is written with a single `write` of the whole line and its newline, then `fdatasync`,
 * so a crash (kill -9, power loss) loses at most the line being written. Such a torn line is the
 * only way a line can lack its newline: on open it is cut off (with a warning) so the next line
 * starts clean, and readers ignore it (with a warning). Any other unreadable line is an error —
 * it means the file was damaged some other way, and silently skipping it would hide that.
 */
import { Effect, Schema, type Scope } from "effect"
import { closeSync, existsSync, fdatasyncSync, mkdirSync, openSync, readFileSync, truncateSync, writeSync } from "node:fs"
import path from "node:path"

export class JsonlError extends Schema.TaggedError<JsonlError>()("JsonlError", {
  path: Schema.String,
  message: Schema.String
}) {}

export interface JsonlWriter<A> {
  readonly path: string
  /** Durable when it succeeds. */
  readonly append: (row: A) => Effect.Effect<void, JsonlError>
}

const NEWLINE = 0x0a

/** Where the complete lines of `bytes` end (after the last newline); past it is a torn line. */
const completeLength = (bytes: Uint8Array): number => bytes.lastIndexOf(NEWLINE) + 1

const describe = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** JSON that refuses NaN and ±Infinity instead of writing them as `null` (which would not read back). */
const toJson = (value: unknown): string =>
  JSON.stringify(value, (key, v) => {
    if (typeof v === "number" && !Number.isFinite(v)) throw new Error(`${key === "" ? "value" : `"${key}"`} is ${v}, which JSON cannot hold`)
    return v
  })

/** Cuts a torn last line off an existing file, so appends start on a line of their own. */
const repairTail = (file: string) =>
  Effect.gen(function*() {
    if (!existsSync(file)) return
    const bytes = yield* Effect.try({ try: () => readFileSync(file), catch: (e) => new JsonlError({ path: file, message: describe(e) }) })
    const complete = completeLength(bytes)
    if (complete === bytes.length) return
    yield* Effect.logWarning(`${file}: ignoring a torn last line (${bytes.length - complete} bytes, no newline): a write was interrupted`)
    yield* Effect.try({ try: () => truncateSync(file, complete), catch: (e) => new JsonlError({ path: file, message: describe(e) }) })
  })

/** Opens `file` for appending rows of `schema` (creating it and its directory); closed with the scope. */
export const openJsonl = <A, I>(file: string, schema: Schema.Schema<A, I>): Effect.Effect<JsonlWriter<A>, JsonlError, Scope.Scope> =>
  Effect.gen(function*() {
    const fail = (e: unknown) => new JsonlError({ path: file, message: describe(e) })
    yield* Effect.try({ try: () => mkdirSync(path.dirname(file), { recursive: true }), catch: fail })
    yield* repairTail(file)
    // After close the descriptor number may belong to another file: never write through it again.
    let open = true
    const fd = yield* Effect.acquireRelease(
      Effect.try({ try: () => openSync(file, "a"), catch: fail }),
      (fd) =>
        Effect.sync(() => {
          open = false
          closeSync(fd)
        })
    )
    const encode = Schema.encode(schema)
    const writeLine = (line: Buffer) => {
      let written = 0
      while (written < line.length) written += writeSync(fd, line, written, line.length - written)
      fdatasyncSync(fd)
    }
    const append = (row: A) =>
      Effect.gen(function*() {
        if (!open) return yield* new JsonlError({ path: file, message: "the log is closed" })
        const encoded = yield* encode(row).pipe(
          Effect.mapError((e) => new JsonlError({ path: file, message: `row does not match its schema: ${e.message}` }))
        )
        yield* Effect.try({ try: () => writeLine(Buffer.from(`${toJson(encoded)}\n`)), catch: fail })
      })
    return { path: file, append }
  })

/**
 * The rows of a JSONL file (none when it does not exist). A torn last line is ignored with a
 * warning; any other line that does not parse or decode is an error naming its line number.
 */
export const readJsonl = <A, I>(file: string, schema: Schema.Schema<A, I>): Effect.Effect<ReadonlyArray<A>, JsonlError> =>
  Effect.gen(function*() {
    if (!existsSync(file)) return []
    const bytes = yield* Effect.try({ try: () => readFileSync(file), catch: (e) => new JsonlError({ path: file, message: describe(e) }) })
    const complete = completeLength(bytes)
    if (complete < bytes.length) {
      yield* Effect.logWarning(`${file}: ignoring a torn last line (${bytes.length - complete} bytes, no newline)`)
    }
    const decode = Schema.decodeUnknown(schema)
    const lines = bytes.subarray(0, complete).toString("utf8").split("\n")
    const rows: Array<A> = []
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!
      if (line.trim() === "") continue
      const lineError = (message: string) => new JsonlError({ path: file, message: `line ${i + 1}: ${message}` })
      const json = yield* Effect.try({ try: () => JSON.parse(line) as unknown, catch: (e) => lineError(describe(e)) })
      rows.push(yield* decode(json).pipe(Effect.mapError((e) => lineError(e.message))))
    }
    return rows
  })
