/**
 * `npm run build` ends with scripts/prune-dist.mjs: outputs under a package's dist/ whose source
 * is gone are deleted (tsc never deletes them), everything with a source is kept. Run as the
 * build runs it, on a scratch repository layout.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const SCRIPT = fileURLToPath(new URL("../../scripts/prune-dist.mjs", import.meta.url))
const tmp = mkdtempSync(join(tmpdir(), "reins-prune-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

const touch = (...parts: Array<string>) => {
  const file = join(tmp, ...parts)
  mkdirSync(dirname(file), { recursive: true })
  writeFileSync(file, "")
}

describe("prune-dist", () => {
  it("deletes the outputs of removed sources and empty folders, keeps the rest and the CLI bundle", () => {
    touch("runtime", "src", "Kernel.ts")
    touch("packages", "policy", "src", "tokenizer", "Tokenizer.ts")
    touch("packages", "policy", "src", "device", "worker-bootstrap.mjs")
    touch("packages", "policy", "src", "chat", "chat_template.jinja")
    const kept = [
      ["runtime", "dist", "Kernel.js"],
      ["runtime", "dist", "Kernel.d.ts.map"],
      ["runtime", "dist", ".tsbuildinfo"],
      ["packages", "policy", "dist", "tokenizer", "Tokenizer.js"],
      ["packages", "policy", "dist", "tokenizer", "Tokenizer.d.ts"],
      ["packages", "policy", "dist", "device", "worker-bootstrap.mjs"],
      ["packages", "policy", "dist", "chat", "chat_template.jinja"],
      // bundle-cli.mjs's output, rebuilt whole after the prune
      ["packages", "reins", "dist", "cli-bundle", "chunk-ABC123.mjs"]
    ]
    const stale = [
      ["runtime", "dist", "Old.js"],
      ["packages", "policy", "dist", "tokenizer", "Trainer.js"],
      ["packages", "policy", "dist", "tokenizer", "Trainer.js.map"],
      ["packages", "policy", "dist", "tokenizer", "Trainer.d.ts"],
      ["packages", "policy", "dist", "gone", "deep", "Module.d.ts.map"],
      ["packages", "policy", "dist", "device", "old-child.mjs"]
    ]
    for (const f of [...kept, ...stale]) touch(...f)
    const out = execFileSync(process.execPath, [SCRIPT, tmp], { encoding: "utf8" })
    expect(out).toContain(`removed ${stale.length} stale files`)
    for (const f of kept) expect(existsSync(join(tmp, ...f)), f.join("/")).toBe(true)
    for (const f of stale) expect(existsSync(join(tmp, ...f)), f.join("/")).toBe(false)
    expect(existsSync(join(tmp, "packages", "policy", "dist", "gone"))).toBe(false)
    expect(readdirSync(join(tmp, "packages", "policy", "dist")).sort()).toEqual(["chat", "device", "tokenizer"])
    // Nothing stale left: a second run removes nothing and says nothing.
    expect(execFileSync(process.execPath, [SCRIPT, tmp], { encoding: "utf8" })).toBe("")
  })
})
