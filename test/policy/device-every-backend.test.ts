/**
 * The device's training side on a real WebGPU device (Mesa's lavapipe here, which `.ci/run`
 * installs) against wasm: Train (one step, π_old the current policy; two steps with π_old scored
 * and the optimizer remade for another weight decay; one whose second step fails, and one whose
 * caller goes away mid-way, both rolled back), GetWeights, Save with the optimizer and Restore,
 * for the whole model and for LoRA adapters (fixtures/device-every-backend.ts). Every
 * read there is asynchronous, as WebGPU in Node needs; both backends train the same model to the
 * same log-probabilities, and their engines then generate the same greedy tokens. Without a Vulkan device the WebGPU half is skipped, except in CI.
 */
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync } from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../..", import.meta.url))
const icd = "/usr/share/vulkan/icd.d"
const lavapipe = existsSync(icd) && readdirSync(icd).some((f) => f.startsWith("lvp_icd"))

interface Line {
  device: "full" | "lora"
  backend: string
  versions: Array<number>
  losses: Array<number>
  approxKl: Array<number | null>
  moved: [number, number]
  after: Array<Array<number>>
  generated: { ids: Array<number>; versions: Array<number> }
  weights: { tensors: number; version: number; finite: boolean }
  saved: { optimizer: boolean; files: Array<string> }
  restored: { optimizer: boolean; worst: number }
  rolledBack: { error: string; scores: boolean; steps: Array<number | undefined>; tensors: Array<number>; interrupted: { unfinished: boolean; scores: boolean; scoreLeftRunning: number }; gpuError: { message: string; scores: boolean } | null; moments: boolean }
}

const run = (backend: "wasm" | "webgpu"): Array<Line> => {
  const child = spawnSync(process.execPath, [path.join(root, "node_modules/tsx/dist/cli.mjs"), path.join(root, "test/policy/fixtures/device-every-backend.ts")], {
    encoding: "utf8",
    env: { ...process.env, REINS_BACKEND: backend, XDG_RUNTIME_DIR: process.env["XDG_RUNTIME_DIR"] ?? "/tmp" },
    timeout: 180_000
  })
  const output = `${child.stdout}\n${child.stderr}`
  expect(child.status, output).toBe(0)
  expect(child.stdout).toMatch(/^done$/m)
  return child.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Line)
}

const holdsTogether = (lines: ReadonlyArray<Line>, backend: string) => {
  expect(lines.map((l) => [l.device, l.backend])).toEqual([["full", backend], ["lora", backend]])
  for (const l of lines) {
    expect(l.versions, l.device).toEqual([1, 2, 2, 9])
    expect(l.losses, l.device).toHaveLength(3)
    for (const loss of l.losses) expect(Number.isFinite(loss), l.device).toBe(true)
    // the first step's π_old is the current policy: the ratio is 1, its KL estimate 0
    expect(Math.abs(l.approxKl[0]!), l.device).toBeLessThan(1e-6)
    // positive advantage up, negative down
    expect(l.moved[0], l.device).toBeGreaterThan(0.1)
    expect(l.moved[1], l.device).toBeLessThan(-0.1)
    // the engine serves the trained weights
    expect(l.generated.ids, l.device).toHaveLength(8)
    expect(l.generated.versions, l.device).toEqual([2])
    expect(l.weights, l.device).toMatchObject({ version: 2, finite: true })
    expect(l.weights.tensors, l.device).toBeGreaterThan(10)
    expect(l.saved.optimizer, l.device).toBe(true)
    expect(l.saved.files, l.device).toContain("optimizer.safetensors")
    expect(l.saved.files, l.device).toContain(l.device === "lora" ? "adapter_model.safetensors" : "model.safetensors")
    // a failed Train puts back the weights and the optimizer exactly (its rollback point kept on the
    // device: the model is small), and so does one whose caller went away mid-update, then and later
    const [tensors] = l.rolledBack.tensors
    expect(l.rolledBack, l.device).toEqual({
      error: expect.stringMatching(/step 1 failed: .*gradient norm/),
      scores: true,
      steps: [3, 3],
      tensors: [tensors, tensors, tensors, tensors],
      interrupted: { unfinished: true, scores: true, scoreLeftRunning: 0 },
      // on WebGPU a step in which the GPU reported an error (one it does not throw) fails the Train, rolled back
      gpuError: backend === "webgpu" ? { message: expect.stringMatching(/^Train: step \d+: the GPU reported an error, so nothing computed since is used: Buffer usages must not be 0/), scores: true } : null,
      moments: true
    })
    // Restore puts back exactly what was saved
    expect(l.restored.optimizer, l.device).toBe(true)
    expect(l.restored.worst, l.device).toBeLessThan(1e-6)
  }
}

describe("the device's training side", () => {
  const wasm = (): Array<Line> => run("wasm")
  let reference: Array<Line> | undefined

  it("on wasm: Train, GetWeights, Save and Restore, whole model and LoRA", () => {
    reference = wasm()
    holdsTogether(reference, "wasm")
  }, 200_000)

  it.runIf(lavapipe || process.env["CI"] === "true")("on a real WebGPU device: the same calls, reading asynchronously, to wasm's log-probabilities", () => {
    const lines = run("webgpu")
    holdsTogether(lines, "webgpu")
    reference ??= wasm()
    lines.forEach((l, i) => {
      const r = reference![i]!
      l.losses.forEach((loss, j) => expect(Math.abs(loss - r.losses[j]!), `${l.device} loss ${j}`).toBeLessThan(1e-4))
      l.after.forEach((lp, s) => lp.forEach((x, t) => expect(Math.abs(x - r.after[s]![t]!), `${l.device} sequence ${s} token ${t}`).toBeLessThan(1e-3)))
      expect(l.generated.ids, `${l.device}: greedy tokens after training`).toEqual(r.generated.ids)
    })
  }, 200_000)
})
