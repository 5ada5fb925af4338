import { describe, expect, it } from "@effect/vitest"
import { PauseStats, VersionMetrics } from "@reins/protocol"
import { buildBatch, DeviceClock, JsonlError, openJsonl, readJsonl, staleness, versionMetrics } from "@reins/trainer"
import { Effect, Either, Logger, Schema } from "effect"
import { spawn } from "node:child_process"
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"
import { chain, reward, trace } from "./traces.js"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })))
const tempFile = (name: string) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "reins-trainer-"))
  dirs.push(dir)
  return path.join(dir, "nested", name)
}

const Row = Schema.Struct({ i: Schema.Int, note: Schema.String })
/** The rows of fixtures/jsonl-writer.ts. */
const WriterRow = Schema.Struct({ i: Schema.Int, pad: Schema.String })

/** Runs `effect` with warnings captured. */
const withWarnings = <A, E>(effect: Effect.Effect<A, E>) => {
  const warnings: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (logLevel._tag === "Warning") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
  })
  return effect.pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Effect.map((a) => ({ value: a, warnings }))
  )
}

const writeRows = (file: string, rows: ReadonlyArray<typeof Row.Type>) =>
  Effect.scoped(Effect.flatMap(openJsonl(file, Row), (w) => Effect.forEach(rows, (r) => w.append(r), { discard: true })))

describe("JSONL metrics log", () => {
  it.effect("appends rows durably and reads them back, across reopenings", () =>
    Effect.gen(function*() {
      const file = tempFile("metrics.jsonl")
      yield* writeRows(file, [{ i: 1, note: "a" }, { i: 2, note: "b" }])
      yield* writeRows(file, [{ i: 3, note: "c" }])
      expect(readFileSync(file, "utf8")).toBe('{"i":1,"note":"a"}\n{"i":2,"note":"b"}\n{"i":3,"note":"c"}\n')
      expect(yield* readJsonl(file, Row)).toEqual([{ i: 1, note: "a" }, { i: 2, note: "b" }, { i: 3, note: "c" }])
      expect(yield* readJsonl(tempFile("missing.jsonl"), Row)).toEqual([])
    }))

  it.effect("ignores a torn last line with a warning, and cuts it off before appending", () =>
    Effect.gen(function*() {
      const file = tempFile("metrics.jsonl")
      yield* writeRows(file, [{ i: 1, note: "a" }, { i: 2, note: "b" }])
      appendFileSync(file, '{"i":3,"no') // a crash in the middle of a write
      const read = yield* withWarnings(readJsonl(file, Row))
      expect(read.value).toEqual([{ i: 1, note: "a" }, { i: 2, note: "b" }])
      expect(read.warnings.join("\n")).toMatch(/torn last line/)

      const reopened = yield* withWarnings(writeRows(file, [{ i: 3, note: "c" }]))
      expect(reopened.warnings.join("\n")).toMatch(/torn last line \(10 bytes/)
      const after = yield* withWarnings(readJsonl(file, Row))
      expect(after.value.map((r) => r.i)).toEqual([1, 2, 3])
      expect(after.warnings).toEqual([])
    }))

  it.effect("reports a damaged line that is not the last one, with its number", () =>
    Effect.gen(function*() {
      const file = tempFile("metrics.jsonl")
      yield* writeRows(file, [{ i: 1, note: "a" }])
      appendFileSync(file, "garbage\n")
      yield* writeRows(file, [{ i: 2, note: "b" }])
      const error = yield* Effect.flip(readJsonl(file, Row))
      expect(error).toBeInstanceOf(JsonlError)
      expect(error.message).toMatch(/^line 2: /)
      writeFileSync(file, '{"i":"one","note":"a"}\n')
      expect((yield* Effect.flip(readJsonl(file, Row))).message).toMatch(/^line 1: .*Expected number/s)
    }))

  it.effect("refuses rows JSON cannot hold instead of writing lines that would not read back", () =>
    Effect.gen(function*() {
      const file = tempFile("metrics.jsonl")
      const Loose = Schema.Struct({ x: Schema.Number })
      const error = yield* Effect.flip(Effect.scoped(Effect.flatMap(openJsonl(file, Loose), (w) => w.append({ x: NaN }))))
      expect(error.message).toMatch(/"x" is NaN/)
      expect(readFileSync(file, "utf8")).toBe("")
    }))

  it.effect("refuses appends once its scope has closed", () =>
    Effect.gen(function*() {
      const file = tempFile("metrics.jsonl")
      const writer = yield* Effect.scoped(openJsonl(file, Row))
      expect((yield* Effect.flip(writer.append({ i: 1, note: "late" }))).message).toBe("the log is closed")
      expect(readFileSync(file, "utf8")).toBe("")
    }))

  it("loses at most the line being written when the writer is killed with SIGKILL", async () => {
    const file = tempFile("killed.jsonl")
    const fixture = fileURLToPath(new URL("./fixtures/jsonl-writer.ts", import.meta.url))
    const child = spawn(process.execPath, ["--import", "tsx", fixture, file], { stdio: ["ignore", "pipe", "inherit"] })
    let acknowledged = -1
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("the writer did not report 20 rows in time")), 30_000)
        let buffered = ""
        child.stdout!.on("data", (chunk: Buffer) => {
          buffered += chunk.toString()
          const lines = buffered.split("\n")
          buffered = lines.pop()!
          for (const line of lines) acknowledged = Number(line)
          if (acknowledged >= 20) {
            clearTimeout(timer)
            child.kill("SIGKILL")
            resolve()
          }
        })
        child.on("exit", () => reject(new Error("the writer exited before it was killed")))
      })
      await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once("exit", resolve)))
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    }
    const rows = await Effect.runPromise(readJsonl(file, WriterRow).pipe(Effect.provide(Logger.remove(Logger.defaultLogger))))
    // Every row acknowledged before the kill is there, in order, and nothing else is damaged.
    expect(rows.length).toBeGreaterThanOrEqual(acknowledged + 1)
    expect(rows.map((r) => r.i)).toEqual(rows.map((_, i) => i))
  })
})

describe("version metrics", () => {
  it("tracks the device's busy fractions from state changes", () => {
    const clock = new DeviceClock(0)
    clock.set("generating", 1_000)
    clock.set("training", 4_000)
    clock.set("generating", 5_000)
    expect(clock.take(6_000)).toMatchObject({ generating: 4 / 6, training: 1 / 6, idle: 1 / 6 })
    // A new period starts in the current state.
    expect(clock.current).toBe("generating")
    expect(clock.take(8_000)).toMatchObject({ generating: 1, training: 0, idle: 0 })
    expect(clock.take(8_000)).toMatchObject({ generating: 0, training: 0, idle: 1 })
  })

  it.effect("assembles a version's line and writes it to the metrics log", () =>
    Effect.gen(function*() {
      const batch = buildBatch(
        [trace("x", "g", chain("x", [[10, 11]], { versions: [[3, 4]] }), [reward(1)]), trace("y", "g", chain("y", [[12]], { versions: [[4]] }), [reward(0)])],
        { mode: "chain", maxTokens: 1024, estimator: "grpo", stdScaling: false, perTurn: false, missingReward: "drop", passThreshold: 1 }
      )
      const clock = new DeviceClock(0, "generating")
      clock.set("training", 3_000)
      const metrics = versionMetrics({
        version: 5,
        at: 1_700_000_000_000,
        wallSeconds: 4,
        batch,
        staleness: staleness(batch.samples, 4),
        pause: new PauseStats({ pauseSeconds: 1.5, drainSeconds: 0.25, heldCalls: 3 }),
        device: clock.take(4_000),
        train: { loss: 0.5, gradNorm: Infinity }
      })
      expect(metrics.reward).toMatchObject({ rollouts: 2, mean: 0.5, passRate: 0.5 })
      expect(metrics.used).toMatchObject({ groups: 1, rollouts: 2, segments: 2, actionTokens: 3 })
      expect(metrics.staleness.histogram).toEqual([2, 1])
      expect(metrics.device).toMatchObject({ generating: 0.75, training: 0.25, idle: 0 })
      expect(metrics.train).toEqual({ loss: 0.5, gradNorm: null })
      expect(metrics.drops["group-zero-variance"]).toMatchObject({ count: 0, actionTokens: 0 })

      const file = tempFile("metrics.jsonl")
      yield* Effect.scoped(Effect.flatMap(openJsonl(file, VersionMetrics), (w) => w.append(metrics)))
      const [back] = yield* readJsonl(file, VersionMetrics)
      expect(back).toEqual(metrics)
      expect(Either.isRight(Schema.decodeUnknownEither(VersionMetrics)(JSON.parse(readFileSync(file, "utf8"))))).toBe(true)
    }))
})
