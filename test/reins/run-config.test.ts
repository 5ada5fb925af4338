/**
 * The run config's output-parser keys: vLLM's names are accepted, anything else fails with the
 * key named (that loadPromptTemplate applies them: test/policy/hf-prompt-template.test.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { loadRunConfig } from "reins"
import { afterAll } from "vitest"

const tmp = mkdtempSync(join(tmpdir(), "reins-run-config-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const config = (name: string, fields: Record<string, unknown>) => {
  const file = join(tmp, `${name}.json`)
  writeFileSync(file, JSON.stringify({ model: "model", tasks: "tasks.jsonl", harness: { command: ["node", "agent.mjs"] }, ...fields }))
  return file
}

describe("run config: output parsers", () => {
  it.effect("accepts vLLM's parser names and 'auto'; absent means detected", () =>
    Effect.gen(function* () {
      const { run } = yield* loadRunConfig(config("named", { tool_parser: "hermes", reasoning_parser: "qwen3" }))
      expect([run.tool_parser, run.reasoning_parser]).toEqual(["hermes", "qwen3"])
      const auto = yield* loadRunConfig(config("auto", { tool_parser: "auto" }))
      expect([auto.run.tool_parser, auto.run.reasoning_parser]).toEqual(["auto", undefined])
    })
  )

  it.effect("refuses an unknown parser, naming the key and the names that exist", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(loadRunConfig(config("bogus", { tool_parser: "pythonic" })))
      expect(e._tag).toBe("RunConfigError")
      expect(e.message).toMatch(/tool_parser/)
      expect(e.message).toMatch(/"hermes"/)
      expect(e.message).toMatch(/"llama3_json"/)
    })
  )
})
