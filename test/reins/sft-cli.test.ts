/**
 * `reins sft` as a real child process: a tiny run on synthetic calc demos writes a model directory
 * that loads, whose loss went down, byte-identical when run again with the same seed; `--init`
 * continues from it; bad input gives a one-line error and exit code 1.
 */
import { describe, expect, it } from "@effect/vitest"
import { loadModelDir } from "@reins/policy"
import { Effect } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { killReinsChildren, runReins } from "../reinsCli.js"
import { calcDemo, calcDemosJsonl } from "../trainer/sft-fixtures.js"

const tmp = mkdtempSync(join(tmpdir(), "reins-sft-cli-"))
afterAll(() => {
  killReinsChildren()
  rmSync(tmp, { recursive: true, force: true })
})

/** Runs `reins sft ...args` with a bounded lifetime. */
const sft = (args: ReadonlyArray<string>) => runReins(["sft", ...args], 110_000)

const demos = join(tmp, "demos.jsonl")
writeFileSync(demos, calcDemosJsonl(48, 9))
const tiny = ["--demos", demos, "--dim", "32", "--layers", "1", "--heads", "2", "--context", "128", "--vocab", "400", "--batch", "16", "--steps", "12", "--lr", "0.01", "--seed", "7"]

describe("reins sft", () => {
  it.live("trains a tiny policy: loadable, loss down, deterministic, and --init continues it", () =>
    Effect.gen(function*() {
      const [a, b] = [join(tmp, "a"), join(tmp, "b")]
      const runs = yield* Effect.promise(() => Promise.all([sft([...tiny, "--out", a]), sft([...tiny, "--out", b])]))
      for (const run of runs) {
        expect(run.code, run.stderr).toBe(0)
        expect(run.stdout).toMatch(/^trained 12 steps in .* s CPU \(\d+ tokens\/s\): loss [\d.]+ → [\d.]+; wrote /)
      }
      const log = runs[0]!.stderr
      expect(log).toMatch(/^tokenizer: \d+ tokens learned from the demos/m)
      expect(log).toMatch(/^48 sequences, \d+ tokens .* 12 steps of 16 \(4\.00 epochs\)$/m)
      expect(log).toMatch(/^step 1\/12 {2}loss [\d.]+ {2}lr .* tokens\/s {2}[\d.]+ s\/step$/m)
      expect(log).toMatch(/^step 12\/12 /m)

      // A complete model directory, and nothing left beside it.
      const dir = yield* loadModelDir(a)
      expect(dir.config.dModel).toBe(32)
      expect(dir.config.contextLength).toBe(128)
      expect(dir.config.version).toBe(0)
      expect(dir.tokenizer.encode("37").length).toBe(2)
      expect(dir.chatTemplate.source).toContain("Tools:")
      expect(readdirSync(tmp).filter((f) => f.includes(".tmp-") || f.includes(".old-"))).toEqual([])

      const record = JSON.parse(readFileSync(join(a, "sft.json"), "utf8"))
      expect(record.steps).toBe(12)
      expect(record.demos.sequences).toBe(48)
      expect(record.final_loss).toBeLessThan(record.first_loss * 0.8)

      // Same seed, same arguments: the same bytes.
      for (const file of ["model.safetensors", "tokenizer.json", "chat_template.jinja", "config.json"]) {
        expect(readFileSync(join(b, file)).equals(readFileSync(join(a, file))), file).toBe(true)
      }

      // --init continues (in place: the directory is replaced atomically) and bumps the version.
      const more = yield* Effect.promise(() => sft(["--demos", demos, "--init", a, "--out", a, "--steps", "3", "--batch", "16", "--lr", "0.003"]))
      expect(more.code, more.stderr).toBe(0)
      expect(more.stderr).toMatch(/from .*\/a, backend/)
      const continued = yield* loadModelDir(a)
      expect(continued.config.version).toBe(1)
      expect(JSON.parse(readFileSync(join(a, "sft.json"), "utf8")).init).toBe(a)
      expect(readFileSync(join(a, "tokenizer.json")).equals(readFileSync(join(b, "tokenizer.json")))).toBe(true)
      expect(readFileSync(join(a, "model.safetensors")).equals(readFileSync(join(b, "model.safetensors")))).toBe(false)
    }), 150_000)

  it.live("fails with one clear line on bad input", () =>
    Effect.gen(function*() {
      const bad = join(tmp, "bad.jsonl")
      writeFileSync(bad, [JSON.stringify(calcDemo(1, "+", 2)), "", "{oops"].join("\n"))
      const other = join(tmp, "other")
      mkdirSync(other)
      writeFileSync(join(other, "notes.txt"), "mine")
      // Each run is a whole CLI start (~5 s of CPU): a few representative failures, in parallel.
      const [missing, badLine, mixed, notModel] = yield* Effect.promise(() =>
        Promise.all([
          sft(["--demos", join(tmp, "nope.jsonl"), "--out", join(tmp, "x1")]),
          sft(["--demos", bad, "--out", join(tmp, "x2")]),
          sft(["--demos", demos, "--out", join(tmp, "x3"), "--init", tmp, "--dim", "64", "--steps", "3"]),
          sft(["--demos", demos, "--out", other])
        ])
      )
      for (const run of [missing, badLine, mixed, notModel]) expect(run.code, run.stderr).toBe(1)
      expect(missing.stderr.trim()).toBe(`reins sft: demo file not found: ${join(tmp, "nope.jsonl")}`)
      expect(badLine.stderr.trim()).toMatch(new RegExp(`^reins sft: ${bad.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:3: not valid JSON`))
      expect(mixed.stderr.trim()).toBe("reins sft: --dim cannot be combined with --init (the model directory fixes the vocabulary, chat template and model shape)")
      expect(notModel.stderr.trim()).toBe(`reins sft: --out ${other} is a non-empty directory without a model (config.json); refusing to replace it`)
      expect(readFileSync(join(other, "notes.txt"), "utf8")).toBe("mine")
      for (const x of ["x1", "x2", "x3"]) expect(existsSync(join(tmp, x))).toBe(false)
    }), 150_000)
})
