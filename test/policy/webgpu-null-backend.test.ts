/**
 * The WebGPU code paths compile and validate: on Dawn's Null backend (the `webgpu` package's own,
 * no GPU needed), the WebGPU decoder's shaders and device draws and a training step with
 * its optimizer produce no validation error. A shader that does not compile, or an op binding more
 * storage buffers than a stage allows, is an error there — and on a GPU a silent no-op.
 */
import { spawnSync } from "node:child_process"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../..", import.meta.url))

describe("WebGPU on Dawn's Null backend", () => {
  it("decoding and a training step create only valid shaders and pipelines", () => {
    const run = spawnSync(process.execPath, [path.join(root, "node_modules/tsx/dist/cli.mjs"), path.join(root, "test/policy/fixtures/webgpu-null-backend.ts")], {
      encoding: "utf8",
      timeout: 120_000
    })
    const output = `${run.stdout}\n${run.stderr}`
    expect(run.status, output).toBe(0)
    expect(output).toMatch(/^done$/m)
    expect(output).not.toMatch(/validation|error/i)
  }, 150_000)
})
