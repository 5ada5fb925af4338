/** The device actor in a worker thread: creates the default policy, samples, pauses and resumes. */
import { describe, expect, it } from "@effect/vitest"
import { Device, deviceWorkerLayer, loadTokenizer } from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Chunk, Effect, Fiber, Layer, Stream } from "effect"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { engineSettled } from "./device-fixtures.js"

const greedy = (maxTokens: number) =>
  new SamplingParams({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], topLogprobs: 0 })

describe("device actor", () => {
  it("runs the engine in a worker thread: info, streamed generation, pause/resume", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-device-"))
    const modelDir = path.join(dir, "model")
    try {
      await Effect.runPromise(Effect.gen(function*() {
        yield* Layer.build(deviceWorkerLayer({ modelDir, createDefault: true }))
        const device = yield* Device.client
        const info = yield* device.Info()
        expect(info.modelId).toBe("reins-default")
        expect(info.version).toBe(0)
        expect(existsSync(path.join(modelDir, "model.safetensors"))).toBe(true)

        const tokenizer = yield* loadTokenizer(modelDir)
        const promptIds = tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", { allowSpecial: true })
        const request = (id: string) => new GenerateRequest({ requestId: id, promptIds, params: greedy(12) })
        const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(device.Generate(request("a"))))
        const ids = chunks.flatMap((c) => Array.from(c.outputIds))
        expect(ids.length).toBeGreaterThan(0)
        expect(ids.length).toBeLessThanOrEqual(12)
        expect(chunks.flatMap((c) => Array.from(c.versions)).every((v) => v === 0)).toBe(true)
        expect(chunks.flatMap((c) => Array.from(c.logprobs)).every((lp) => lp <= 0 && Number.isFinite(lp))).toBe(true)
        expect(chunks.at(-1)?.finishReason).toMatch(/^(stop|length)$/)

        // A request made while paused waits for resume, then gets the same greedy tokens.
        yield* device.Pause({ mode: "drain" })
        const atPause = (yield* device.Info()).engine
        const held = yield* Effect.fork(Stream.runCollect(device.Generate(request("b"))))
        // Held, as a state: the engine has seen the request (it is queued) and parked with it —
        // nothing runs until the next change. A device that ran it would show tokens instead.
        const engine = yield* engineSettled(device, atPause.generatedTokens)
        expect(engine).toMatchObject({ waiting: 1, running: 0, held: 0, steps: atPause.steps, generatedTokens: atPause.generatedTokens })
        expect(held.unsafePoll()).toBeNull()
        yield* device.Resume()
        const after = Chunk.toReadonlyArray(yield* Fiber.join(held)).flatMap((c) => Array.from(c.outputIds))
        expect(after).toEqual(ids)
      }).pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal())))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
