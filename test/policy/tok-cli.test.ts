/**
 * `reins tokenizer train` as a real child process: it writes a loadable model-directory half
 * (tokenizer.json + chat_template.jinja), and bad input gives a one-line error and exit code 1.
 */
import { describe, expect, it } from "@effect/vitest"
import { ChatTemplate, loadChatTemplate, loadTokenizer } from "@reins/policy"
import { Effect } from "effect"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { killReinsChildren, runReins } from "../reinsCli.js"
import { makeCorpus } from "./tok-fixtures.js"

const tmp = mkdtempSync(join(tmpdir(), "reins-tok-cli-"))
afterAll(() => {
  killReinsChildren()
  rmSync(tmp, { recursive: true, force: true })
})

const reins = (args: ReadonlyArray<string>) => runReins(args, 50_000)

describe("reins tokenizer train", () => {
  const corpus = join(tmp, "corpus.txt")
  writeFileSync(corpus, makeCorpus(21, 100_000))

  it.live("writes tokenizer.json and chat_template.jinja that load back", () =>
    Effect.gen(function* () {
      const out = join(tmp, "model")
      const run = yield* Effect.promise(() => reins(["tokenizer", "train", "--corpus", corpus, "--vocab", "400", "--out", out]))
      expect(run.stderr).toBe("")
      expect(run.code).toBe(0)
      expect(run.stdout).toMatch(/trained 400 tokens \(256 bytes \+ 139 merges \+ 5 special\)/)
      const tok = yield* loadTokenizer(out)
      expect(tok.vocabSize).toBe(400)
      expect(tok.encode(" the").length).toBe(1)
      const template = yield* loadChatTemplate(out)
      expect(template.source).toBe(ChatTemplate.default().source)
      expect(JSON.parse(readFileSync(join(out, "tokenizer.json"), "utf8")).model.type).toBe("BPE")
    })
  )

  it.live("fails clearly on a missing corpus and on a vocabulary below 256 + specials", () =>
    Effect.gen(function* () {
      const [missing, small] = yield* Effect.promise(() =>
        Promise.all([
          reins(["tokenizer", "train", "--corpus", join(tmp, "nope.txt"), "--vocab", "400", "--out", join(tmp, "m1")]),
          reins(["tokenizer", "train", "--corpus", corpus, "--vocab", "260", "--out", join(tmp, "m2")])
        ])
      )
      expect(missing.code).toBe(1)
      expect(missing.stderr.trim()).toBe(`reins tokenizer train: corpus file not found: ${join(tmp, "nope.txt")}`)
      expect(small.code).toBe(1)
      expect(small.stderr.trim()).toBe("reins tokenizer train: --vocab 260 is too small: it must be at least 261 (256 byte tokens + 5 special tokens)")
    })
  )
})
