/**
 * The WebGPU decoder's shaders computed for real: on Mesa's lavapipe (Vulkan on the CPU, which
 * `.ci/run` installs), its logits equal the reference decoder's (tfjs ops, reference/
 * tensorDecoder.ts), and its draws the same tokens (fixtures/webgpu-decode.ts). The reference is
 * held to the CPU decoder elsewhere (tensor-decode.test.ts), so this holds the shaders to the
 * reference arithmetic; the engine on it generates what it does on the reference, new weights
 * included. Without a
 * Vulkan device the test is skipped, except in CI, where that is a failure.
 */
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync } from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const root = fileURLToPath(new URL("../..", import.meta.url))
const icd = "/usr/share/vulkan/icd.d"
const lavapipe = existsSync(icd) && readdirSync(icd).some((f) => f.startsWith("lvp_icd"))

describe.runIf(lavapipe || process.env["CI"] === "true")("WebGPU decoder on a real WebGPU device", () => {
  it("gives the reference decoder's logits and draws with either product shader: prompts, decoding, both together, new weights, GQA, q/k norms, biases, RoPE scaling; the engine runs it by default; a model it cannot run is refused", () => {
    const run = spawnSync(process.execPath, [path.join(root, "node_modules/tsx/dist/cli.mjs"), path.join(root, "test/policy/fixtures/webgpu-decode.ts")], {
      encoding: "utf8",
      env: { ...process.env, REINS_BACKEND: "webgpu", XDG_RUNTIME_DIR: process.env["XDG_RUNTIME_DIR"] ?? "/tmp" },
      timeout: 240_000
    })
    const output = `${run.stdout}\n${run.stderr}`
    expect(run.status, output).toBe(0)
    expect(output).toMatch(/^done$/m)
    const lines = run.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l))
    type Against = { worst: number; compared: number; draws: Array<{ same: boolean; dLogprob: number }> }
    const results = lines.filter((l) => "model" in l) as Array<{ model: string; steps: number; largest: number; chosen: Against; tiled: Against; allocations: number }>
    expect(results.map((r) => r.model)).toEqual(["qwen3", "qwen2"])
    for (const r of results) {
      expect(r.largest, r.model).toBeGreaterThan(0.1) // real logits, not zeros
      // as the decoder chooses its products' shaders, and with the tiled product everywhere
      for (const [name, a] of [["chosen", r.chosen], ["tiled", r.tiled]] as const) {
        expect(a.compared, `${r.model} ${name}`).toBeGreaterThan(5_000)
        expect(a.worst, `${r.model} ${name}`).toBeLessThan(1e-4)
        expect(a.draws, `${r.model} ${name}`).toHaveLength(5)
        for (const d of a.draws) {
          expect(d.same, `${r.model} ${name}`).toBe(true)
          expect(d.dLogprob, `${r.model} ${name}`).toBeLessThan(1e-4)
        }
      }
      expect(r.allocations, r.model).toBe(0)
    }
    // the engine: on WebGPU it runs this decoder by default, and generates what it does on the reference
    const engine = lines.find((l) => "engine" in l) as { engine: string; webgpu: Array<{ ids: Array<number>; logprobs: Array<number> }>; tensor: Array<{ ids: Array<number>; logprobs: Array<number> }> }
    expect(engine.engine).toBe("webgpu")
    expect(engine.webgpu).toHaveLength(6)
    engine.webgpu.forEach((g, i) => {
      const t = engine.tensor[i]!
      expect(g.ids, `generation ${i}`).toHaveLength(12)
      expect(g.ids, `generation ${i}`).toEqual(t.ids)
      g.logprobs.forEach((lp, j) => expect(Math.abs(lp - t.logprobs[j]!), `generation ${i}, token ${j}`).toBeLessThan(1e-4))
    })
    // new weights changed what was generated
    expect(engine.webgpu.slice(3).map((g) => g.ids)).not.toEqual(engine.webgpu.slice(0, 3).map((g) => g.ids))
    // a model the shaders cannot run is refused when the device starts, naming the key and what to
    // do: told to load it, and told to create its default policy where it lies
    for (const key of ["refused", "refusedAsDefault"]) {
      const refused = lines.find((l) => key in l) as Record<string, string>
      expect(refused[key], key).toMatch(/reins-webgpu-refuse-.*the WebGPU decoder cannot run this model \(hidden_size \(12\), intermediate_size \(32\) and head_dim \(6\) must be multiples of 4\); serve it on the wasm backend \(REINS_BACKEND=wasm\)/)
    }
  }, 300_000)
})
