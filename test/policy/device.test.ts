/** The device actor in a worker thread: creates the default policy, samples, pauses and resumes. */
import { describe, expect, it } from "@effect/vitest"
import { Device, deviceWorkerLayer, loadTokenizer } from "@reins/policy"
import { GenerateRequest, SamplingParams } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Chunk, Effect, Fiber, Layer, Stream } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
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

  it("serves fewer tokens per sequence than the model's context when its KV memory is smaller (REINS_KV_CACHE_MB)", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "reins-device-kv-"))
    const modelDir = path.join(dir, "model")
    const before = process.env["REINS_KV_CACHE_MB"]
    try {
      /** What a device started with `REINS_KV_CACHE_MB=mb` answers its first call with. */
      const firstCall = (mb: string) => {
        process.env["REINS_KV_CACHE_MB"] = mb
        return Effect.runPromiseExit(
          Effect.gen(function*() {
            yield* Layer.build(deviceWorkerLayer({ modelDir, createDefault: true }))
            return yield* (yield* Device.client).Info()
          }).pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal()))
        ).then(String)
      }
      // A bad value, or one too small for a single 64-token block of this model's cache, fails
      // the device's start, saying why.
      expect(await firstCall("lots")).toContain("REINS_KV_CACHE_MB=lots: expected a positive number of MiB")
      expect(await firstCall("8192")).toContain("REINS_KV_CACHE_MB=8192: at most 4096 MiB here")
      expect(await firstCall("0.01")).toContain("cannot hold one 64-token block of this model's cache")
      process.env["REINS_KV_CACHE_MB"] = "1"
      await Effect.runPromise(Effect.gen(function*() {
        yield* Layer.build(deviceWorkerLayer({ modelDir, createDefault: true }))
        const device = yield* Device.client
        const info = yield* device.Info()
        const config = JSON.parse(readFileSync(path.join(modelDir, "config.json"), "utf8")) as Record<string, number>
        const kvWidth = config["num_key_value_heads"]! * (config["head_dim"] ?? config["hidden_size"]! / config["num_attention_heads"]!)
        const perToken = config["num_hidden_layers"]! * kvWidth * 2 * 4
        const bytes = 1024 * 1024
        // whole 64-token blocks of cache within the memory, less than the model's context
        expect(info.contextLength).toBeLessThan(config["max_position_embeddings"]!)
        expect(info.contextLength % 64).toBe(0)
        expect(info.contextLength * perToken).toBeLessThanOrEqual(bytes)
        expect((info.contextLength + 64) * perToken).toBeGreaterThan(bytes - 65_536) // the decoder's scratch is under 64 KiB here
        const tokenizer = yield* loadTokenizer(modelDir)
        const promptIds = tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", { allowSpecial: true })
        const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(device.Generate(new GenerateRequest({ requestId: "kv", promptIds, params: greedy(4000) }))))
        expect(promptIds.length + chunks.reduce((n, c) => n + c.outputIds.length, 0)).toBeLessThanOrEqual(info.contextLength)
      }).pipe(Effect.scoped, Effect.provide(ActorSystem.layerLocal())))
    } finally {
      if (before === undefined) delete process.env["REINS_KV_CACHE_MB"]
      else process.env["REINS_KV_CACHE_MB"] = before
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
