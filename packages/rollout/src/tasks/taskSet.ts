/**
 * Task sets: JSONL files with one `{"id": string, "input": any, "split"?: "train"|"test"}` per
 * line. A bad line (not JSON, wrong shape, duplicate id) never crashes a run: it is reported with
 * its line number and, by `onBadLine`, skipped (the default) or turned into a `TaskSetError`
 * that lists every bad line at once, so a user fixes the file in one pass.
 *
 * Fields other than id/input/split are kept in `extra`: the verifier sees them (put reference
 * answers there), the harness never does.
 */
import { Task } from "@reins/protocol"
import { Effect, Either, ParseResult, Schema } from "effect"
import { createReadStream } from "node:fs"
import { createInterface } from "node:readline"
import { TaskSetError, TaskSetProblem } from "../errors.js"

export interface TaskSetOptions {
  /** `skip` (default): drop bad lines and report them in `problems`; `fail`: reject the whole set. */
  readonly onBadLine?: "skip" | "fail"
}

export interface TaskSet {
  /** The file it came from (null when parsed from text). */
  readonly path: string | null
  readonly tasks: ReadonlyArray<TaskRecord>
  readonly byId: ReadonlyMap<string, TaskRecord>
  /** Every line that was skipped, with why. Empty when the file is clean. */
  readonly problems: ReadonlyArray<TaskSetProblem>
}

/** A task plus the fields of its line that are not part of `Task` (for the verifier only). */
export interface TaskRecord {
  readonly task: Task
  readonly line: number
  readonly extra: Readonly<Record<string, unknown>>
}

const decodeTask = Schema.decodeUnknownEither(Task)
const known = new Set(["id", "input", "split"])

const formatIssues = (error: ParseResult.ParseError): string =>
  ParseResult.ArrayFormatter.formatErrorSync(error)
    .map((i) => (i.path.length > 0 ? `${i.path.join(".")}: ${i.message}` : i.message))
    .join("; ")

/** Parses one non-blank line; a problem or the task record. */
export const parseTaskLine = (text: string, line: number): Either.Either<TaskRecord, TaskSetProblem> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    return Either.left(new TaskSetProblem({ line, kind: "json", message: `not valid JSON (${(e as Error).message})` }))
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    return Either.left(new TaskSetProblem({ line, kind: "schema", message: "expected a JSON object with id and input" }))
  }
  if (!("input" in json)) {
    return Either.left(new TaskSetProblem({ line, kind: "schema", message: "input: is missing (use null for a task without input)" }))
  }
  return decodeTask(json).pipe(
    Either.mapLeft((e) => new TaskSetProblem({ line, kind: "schema", message: formatIssues(e) })),
    Either.map((task) => ({
      task,
      line,
      extra: Object.fromEntries(Object.entries(json as Record<string, unknown>).filter(([k]) => !known.has(k)))
    }))
  )
}

/** Accumulates lines in order; duplicates of an id keep the first occurrence. */
class Collector {
  readonly tasks: Array<TaskRecord> = []
  readonly byId = new Map<string, TaskRecord>()
  readonly problems: Array<TaskSetProblem> = []

  add(text: string, line: number): void {
    const trimmed = (line === 1 ? text.replace(/^\uFEFF/, "") : text).trim()
    if (trimmed === "") return // blank lines (a trailing newline, spacing) are not tasks
    const parsed = parseTaskLine(trimmed, line)
    if (Either.isLeft(parsed)) return void this.problems.push(parsed.left)
    const record = parsed.right
    const first = this.byId.get(record.task.id)
    if (first !== undefined) {
      return void this.problems.push(
        new TaskSetProblem({ line, kind: "duplicate", message: `duplicate id ${JSON.stringify(record.task.id)} (first on line ${first.line})` })
      )
    }
    this.byId.set(record.task.id, record)
    this.tasks.push(record)
  }

  finish(path: string | null, options: TaskSetOptions): Effect.Effect<TaskSet, TaskSetError> {
    const where = path ?? "task set"
    if (this.problems.length > 0 && (options.onBadLine ?? "skip") === "fail") {
      const shown = this.problems.slice(0, 5).map((p) => `line ${p.line}: ${p.message}`).join("\n  ")
      const more = this.problems.length > 5 ? `\n  ... and ${this.problems.length - 5} more` : ""
      return Effect.fail(
        new TaskSetError({ reason: "bad-lines", path, problems: this.problems, message: `${where}: ${this.problems.length} bad line(s):\n  ${shown}${more}` })
      )
    }
    if (this.tasks.length === 0) {
      return Effect.fail(
        new TaskSetError({ reason: "empty", path, problems: this.problems, message: `${where}: no usable task (${this.problems.length} bad line(s))` })
      )
    }
    return Effect.succeed({ path, tasks: this.tasks, byId: this.byId, problems: this.problems })
  }
}

/** Parses a task set held in memory. */
export const parseTaskSet = (text: string, options: TaskSetOptions = {}): Effect.Effect<TaskSet, TaskSetError> =>
  Effect.suspend(() => {
    const c = new Collector()
    text.split(/\r?\n/).forEach((l, i) => c.add(l, i + 1))
    return c.finish(null, options)
  })

/** Streams a JSONL file line by line (large sets never sit in memory as one string). */
export const loadTaskSet = (path: string, options: TaskSetOptions = {}): Effect.Effect<TaskSet, TaskSetError> =>
  Effect.tryPromise({
    try: async () => {
      const c = new Collector()
      const lines = createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity })
      let n = 0
      for await (const l of lines) c.add(l, ++n)
      return c
    },
    catch: (e) => new TaskSetError({ reason: "unreadable", path, problems: [], message: `cannot read task set ${path}: ${(e as Error).message}` })
  }).pipe(
    Effect.flatMap((c) => c.finish(path, options)),
    Effect.tap((set) =>
      set.problems.length > 0
        ? Effect.logWarning(`task set ${path}: skipped ${set.problems.length} bad line(s)`).pipe(
            Effect.annotateLogs("lines", set.problems.slice(0, 20).map((p) => `${p.line}: ${p.message}`))
          )
        : Effect.void
    )
  )
