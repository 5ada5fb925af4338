/**
 * Checkpoints: the safetensors codec (bit-exact, strict), the model directory round trip (bit
 * exact, version kept, all five files), and clear errors naming the file for truncated, corrupt,
 * inconsistent or missing files — never a half-loaded model.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  AdamW,
  bf16ToF32,
  ChatTemplate,
  CheckpointError,
  ChecksumThread,
  decodeSafetensors,
  encodeHfWeights,
  encodeSafetensors,
  ensureModelDir,
  f32ToBf16,
  GenerationConfig,
  initModelDir,
  loadModel,
  loadModelDir,
  loadOptimizerState,
  reserveHeap,
  SafetensorsReader,
  saveModel,
  saveOptimizerState,
  Transformer,
  uninitialized
} from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { Effect, Exit } from "effect"
import { createHash } from "node:crypto"
import { crc32 } from "node:zlib"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { backend, tinyConfig, tinyTokenizer } from "./model-fixtures.js"

const tmp = mkdtempSync(join(tmpdir(), "reins-ckpt-"))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))
beforeAll(() => backend())

const sameBits = (a: Float32Array | Int32Array | Uint16Array, b: Float32Array | Int32Array | Uint16Array) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))

const failure = <A>(effect: Effect.Effect<A, CheckpointError>): Promise<CheckpointError> =>
  Effect.runPromiseExit(effect).then((exit) => {
    if (Exit.isSuccess(exit)) throw new Error("expected a CheckpointError")
    const e = exit.cause._tag === "Fail" ? exit.cause.error : undefined
    expect(e).toBeInstanceOf(CheckpointError)
    return e!
  })

describe("safetensors", () => {
  it("round-trips F32 and I32 bit-exactly, special values included", () => {
    const f = new Float32Array([0, -0, 1.5, -3.25e-38, Infinity, -Infinity, NaN, 3.4028234e38])
    new Uint32Array(f.buffer)[6] = 0x7fc00123 // a NaN payload must survive too
    const i = new Int32Array([0, -1, 2147483647, -2147483648])
    const bytes = encodeSafetensors({ b: { dtype: "F32", shape: [2, 4], data: f }, a: { dtype: "I32", shape: [4], data: i } }, { note: "x" })
    const header = Number(new DataView(bytes.buffer).getBigUint64(0, true))
    expect((8 + header) % 8).toBe(0)
    const json = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + header)))
    expect(json.a).toEqual({ dtype: "I32", shape: [4], data_offsets: [0, 16] })
    expect(json.b).toEqual({ dtype: "F32", shape: [2, 4], data_offsets: [16, 48] })
    const back = decodeSafetensors(bytes)
    expect(back.metadata["note"]).toBe("x")
    expect(sameBits(back.tensors.get("b")!.data, f)).toBe(true)
    expect(sameBits(back.tensors.get("a")!.data, i)).toBe(true)
    expect(back.tensors.get("b")!.shape).toEqual([2, 4])
    // Same tensors, same bytes.
    expect(Buffer.from(encodeSafetensors({ a: { dtype: "I32", shape: [4], data: i }, b: { dtype: "F32", shape: [2, 4], data: f } }, { note: "x" })).equals(Buffer.from(bytes))).toBe(true)
  })

  it("rejects truncation, bit flips, holes and bad headers with a reason", () => {
    const bytes = encodeSafetensors({ w: { dtype: "F32", shape: [3], data: new Float32Array([1, 2, 3]) } })
    expect(() => decodeSafetensors(bytes.subarray(0, 5))).toThrow(/truncated/)
    expect(() => decodeSafetensors(bytes.subarray(0, bytes.length - 4))).toThrow(/truncated/)
    const flipped = bytes.slice()
    flipped[flipped.length - 2]! ^= 0x10
    expect(() => decodeSafetensors(flipped)).toThrow(/checksum/)
    const badJson = bytes.slice()
    badJson[9] = 0x7b // '{' inside the header
    expect(() => decodeSafetensors(badJson)).toThrow(/corrupt header/)
    const huge = bytes.slice()
    new DataView(huge.buffer).setBigUint64(0, 1n << 40n, true)
    expect(() => decodeSafetensors(huge)).toThrow(/header length/)
    const extra = new Uint8Array(bytes.length + 4)
    extra.set(bytes)
    expect(() => decodeSafetensors(extra)).toThrow(/after the last tensor/)
  })

  it("records the CRC-32 of the data; files written with the SHA-256 of before are still checked; a checksum in the caller's metadata is replaced", async () => {
    const values = Float32Array.from({ length: 300 }, (_, i) => Math.cos(i))
    const bytes = encodeSafetensors({ w: { dtype: "F32", shape: [300], data: values } }, { note: "x", "reins.sha256": "stale", "reins.crc32": "stale" })
    const data = bytes.subarray(bytes.length - values.byteLength)
    expect(decodeSafetensors(bytes).metadata).toEqual({ note: "x", "reins.crc32": crc32(data).toString(16).padStart(8, "0") })
    // The same tensor as a file of before: its header names the SHA-256 instead.
    const legacy = withMetadata(bytes, { note: "x", "reins.sha256": createHash("sha256").update(data).digest("hex") })
    expect(sameBits(decodeSafetensors(legacy).tensors.get("w")!.data, values)).toBe(true)
    const file = join(tmp, "legacy.safetensors")
    writeFileSync(file, legacy)
    const reader = await SafetensorsReader.open(file)
    try {
      let seen = 0
      await reader.scan(() => true, (_, __, chunk) => (seen += chunk.length))
      expect(seen).toBe(values.byteLength)
    } finally {
      await reader.close()
    }
    const flipped = legacy.slice()
    flipped[flipped.length - 3]! ^= 4
    expect(() => decodeSafetensors(flipped)).toThrow(/SHA-256 checksum/)
    await expectChecksumFailure(file, flipped, () => true)
    const flippedNew = bytes.slice()
    flippedNew[flippedNew.length - 3]! ^= 4
    expect(() => decodeSafetensors(flippedNew)).toThrow(/CRC-32 checksum/)
  })
})

/** `bytes` (a safetensors file) with its header's metadata replaced. */
const withMetadata = (bytes: Uint8Array, metadata: Record<string, string>): Uint8Array => {
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true))
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)))
  const json = new TextEncoder().encode(JSON.stringify({ ...header, __metadata__: metadata }))
  const padded = Math.ceil(json.length / 8) * 8
  const out = new Uint8Array(8 + padded + bytes.length - 8 - n).fill(0x20, 8, 8 + padded)
  new DataView(out.buffer).setBigUint64(0, BigInt(padded), true)
  out.set(json, 8)
  out.set(bytes.subarray(8 + n), 8 + padded)
  return out
}

/** Writes `bytes` to `file` and expects a scan (of the tensors `wanted` accepts) to fail its checksum. */
const expectChecksumFailure = async (file: string, bytes: Uint8Array, wanted: (name: string) => boolean) => {
  writeFileSync(file, bytes)
  const reader = await SafetensorsReader.open(file)
  try {
    await expect(reader.scan(wanted, () => {})).rejects.toThrow(/checksum/)
  } finally {
    await reader.close()
  }
}

describe("reading a file once", () => {
  it("scan: every tensor once, in file order, in whole rows, checksummed on the way (a small file: on the reader's thread)", async () => {
    // 1100 rows of 1024 floats: 4.5 MB, more than one read.
    const big = Float32Array.from({ length: 1100 * 1024 }, (_, i) => Math.sin(i))
    const small = Uint16Array.from([1, 2, 3, 4, 5])
    const bytes = encodeSafetensors({ big: { dtype: "F32", shape: [1100, 1024], data: big }, a: { dtype: "BF16", shape: [5], data: small } })
    const file = join(tmp, "scan.safetensors")
    writeFileSync(file, bytes)
    const reader = await SafetensorsReader.open(file)
    const seen: Array<string> = []
    const back = new Float32Array(big.length)
    try {
      await reader.scan((name) => name === "big", (name, tensor, chunk, first) => {
        seen.push(name)
        expect(tensor.shape).toEqual([1100, 1024])
        expect(chunk.length % (1024 * 4)).toBe(0)
        expect(chunk.buffer).not.toBeInstanceOf(SharedArrayBuffer) // no hashing thread for a small file
        back.set(new Float32Array(chunk.buffer, chunk.byteOffset, chunk.length / 4), first)
      })
    } finally {
      await reader.close()
    }
    expect(seen.length).toBeGreaterThan(1)
    expect(sameBits(back, big)).toBe(true)
    // A flipped bit of a tensor nobody asked for still fails the checksum: every byte is read.
    const flipped = Buffer.from(bytes)
    flipped[flipped.length - 1]! ^= 1 // inside "big" (name order: a, then big)
    await expectChecksumFailure(file, flipped, () => false)
  })

  it("scan of a file past 64 MiB: checksummed by a second thread from the same reads (the first chunks here until it has started), a flipped bit found, a failing visit leaves the reader usable", async () => {
    // 17M floats: 68 MB of data, hashed by checksumThread.ts's worker rather than on the way.
    const big = Float32Array.from({ length: 17 << 20 }, (_, i) => i % 65521)
    const bytes = encodeSafetensors({ big: { dtype: "F32", shape: [17 << 10, 1 << 10], data: big } })
    const file = join(tmp, "large-scan.safetensors")
    writeFileSync(file, bytes)
    const reader = await SafetensorsReader.open(file)
    try {
      // A visit that throws midway: the scan fails with its error, and no read is left in flight.
      let calls = 0
      await expect(reader.scan(() => true, () => {
        if (++calls === 3) throw new Error("visit failed")
      })).rejects.toThrow("visit failed")
      const back = new Float32Array(big.length)
      let chunks = 0
      await reader.scan(() => true, (_, __, chunk, first) => {
        chunks++
        // Slow visits (~15 ms each, as a large load's are): the thread starts midway, so this
        // thread hashes the first chunks and hands the CRC over to it.
        for (const until = performance.now() + 15; performance.now() < until;);
        expect(chunk.buffer).toBeInstanceOf(SharedArrayBuffer) // the hashing thread's buffers
        back.set(new Float32Array(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.length)), first)
      })
      expect(chunks).toBe(17)
      expect(sameBits(back, big)).toBe(true)
    } finally {
      await reader.close()
    }
    const flipped = Buffer.from(bytes)
    flipped[flipped.length >> 1]! ^= 8
    await expectChecksumFailure(file, flipped, () => true)
  })

  it("the hashing thread: bytes handed over in shared buffers hash as node:zlib and node:crypto hash them; its buffers come back; a CRC-32 continues from a value handed over; a stopped thread fails its digest", async () => {
    for (const algorithm of ["crc32", "sha256"] as const) {
      const thread = ChecksumThread.tryStart(algorithm, 2, 1000)
      expect(thread).toBeDefined()
      const sha = createHash("sha256")
      let crc = 0
      try {
        for (let k = 0; k < 7; k++) {
          const slot = k % 2
          if (!thread!.isFree(slot)) await thread!.free(slot)
          expect(thread!.isFree(slot)).toBe(true)
          const length = 1000 - k * 100
          for (let i = 0; i < length; i++) thread!.slots[slot]![i] = (k * 31 + i) & 255
          sha.update(thread!.slots[slot]!.subarray(0, length))
          crc = crc32(thread!.slots[slot]!.subarray(0, length), crc)
          thread!.update(slot, length)
          expect(thread!.isFree(slot)).toBe(false) // the thread's until it hands the slot back
        }
        expect(await thread!.digest()).toBe(algorithm === "crc32" ? crc.toString(16).padStart(8, "0") : sha.digest("hex"))
      } finally {
        await thread!.stop()
      }
    }
    // A CRC-32 started elsewhere: the thread says it is ready, then continues from the value handed over.
    const thread = ChecksumThread.tryStart("crc32", 1, 1000)!
    try {
      const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7) & 255)
      for (let i = 0; i < 200 && !thread.ready; i++) await new Promise((resolve) => setTimeout(resolve, 10))
      expect(thread.ready).toBe(true)
      const before = crc32(bytes.subarray(0, 300))
      thread.continueFrom(before.toString(16).padStart(8, "0"))
      thread.slots[0]!.set(bytes.subarray(300))
      thread.update(0, 700)
      expect(await thread.digest()).toBe(crc32(bytes).toString(16).padStart(8, "0"))
    } finally {
      await thread.stop()
    }
    const stopped = ChecksumThread.tryStart("crc32", 1, 8)!
    stopped.update(0, 8)
    await stopped.stop()
    await stopped.free(0) // released, not left waiting on a dead thread
    expect(stopped.isFree(0)).toBe(true)
    await expect(stopped.digest()).rejects.toThrow(/exited/)
  })

  it("weights larger than a read chunk load bit-exact into arrays and into the backend, F32 and BF16", async () => {
    // An untied 20k-vocabulary head of width 64 is 5 MB: read in two chunks, each transposed into place.
    const tok = tinyTokenizer()
    const config = tinyConfig(20000, { dModel: 64, tieEmbeddings: false, nLayers: 1 })
    const model = Transformer.init(config, 2)
    const dir = join(tmp, "large")
    await Effect.runPromise(saveModel(dir, model, tok))
    const weights = model.readWeights()
    model.dispose()
    const asBf16 = Object.fromEntries(Object.entries(weights).map(([n, w]) => [n, bf16ToF32(f32ToBf16(w))]))
    for (const [dtype, want] of [["float32", weights], ["bfloat16", asBf16]] as const) {
      if (dtype === "bfloat16") writeFileSync(join(dir, "model.safetensors"), encodeHfWeights(config, weights, "bfloat16", { version: "0" }))
      const arrays = (await Effect.runPromise(loadModelDir(dir))).weights
      const tensorsBefore = tf.memory().numTensors
      const loaded = await Effect.runPromise(loadModel(dir))
      const onBackend = loaded.model.readWeights()
      loaded.model.dispose()
      expect(tf.memory().numTensors).toBe(tensorsBefore)
      for (const name of Object.keys(want)) {
        expect(sameBits(arrays[name]!, want[name]!), `${dtype} ${name}`).toBe(true)
        expect(sameBits(onBackend[name]!, want[name]!), `${dtype} ${name} on the backend`).toBe(true)
      }
    }
    // A corrupt file fails before a model exists, and leaves no tensor behind.
    const good = readFileSync(join(dir, "model.safetensors"))
    const flipped = Buffer.from(good)
    flipped[flipped.length - 3]! ^= 4
    writeFileSync(join(dir, "model.safetensors"), flipped)
    const tensorsBefore = tf.memory().numTensors
    expect((await failure(loadModel(dir))).message).toMatch(/checksum/)
    expect(tf.memory().numTensors).toBe(tensorsBefore)
  })
})

describe("the wasm heap a model loads into", () => {
  const heapBytes = () => (tf.backend() as unknown as { wasm: { HEAPU8: Uint8Array } }).wasm.HEAPU8.length

  it("grows once for all the weights (reserveHeap); tensors are then allocated unwritten from it, and a reservation that might not fit is skipped", () => {
    expect(tf.getBackend()).toBe("wasm")
    const tensorsBefore = tf.memory().numTensors
    // 200 MB: unreserved, tfjs's heap would grow by at most ~96 MB at a time.
    const bytes = 200 << 20
    reserveHeap(bytes)
    const reserved = heapBytes()
    const pieces = Array.from({ length: 25 }, () => uninitialized([1024, 2048]))
    expect(heapBytes()).toBe(reserved)
    for (const t of pieces) {
      expect(t.shape).toEqual([1024, 2048])
      expect(t.dtype).toBe("float32")
    }
    tf.dispose(pieces)
    expect(tf.memory().numTensors).toBe(tensorsBefore)
    // More than the heap could ever grow by: nothing is allocated (a failed allocation would abort the module), and tfjs still works.
    reserveHeap(2 ** 32)
    expect(heapBytes()).toBe(reserved)
    expect(tf.tidy(() => Array.from(tf.add(tf.tensor1d([1, 2]), 1).dataSync()))).toEqual([2, 3])
  })
})

describe("model directory", () => {
  const tok = tinyTokenizer()

  it("save → load is bit-exact and keeps the version, template and generation config", async () => {
    const dir = join(tmp, "roundtrip")
    const model = Transformer.init(tinyConfig(tok.vocabSize, { nKvHeads: 2, qkvBias: true, oBias: true, qkNorm: true, tieEmbeddings: false }), 3)
    model.version = 7
    const template = ChatTemplate.default()
    const gen = new GenerationConfig({ eosTokenIds: [...tok.stopIds], temperature: 0.7, topP: 0.9, topK: 20, maxNewTokens: 99 })
    await Effect.runPromise(saveModel(dir, model, tok, { chatTemplate: template, generationConfig: gen }))
    expect(readdirSync(dir).sort()).toEqual(["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"])
    const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"))
    // Our own models are saved as the Hugging Face architecture they are: here Qwen3 (q/k norms).
    expect(config).toMatchObject({ architectures: ["Qwen3ForCausalLM"], vocab_size: tok.vocabSize, hidden_size: 32, num_hidden_layers: 2, num_key_value_heads: 2, attention_bias: true, tie_word_embeddings: false, torch_dtype: "float32" })
    const loaded = await Effect.runPromise(loadModel(dir))
    expect(loaded.model.version).toBe(7)
    expect(loaded.config).toEqual(model.config.withVersion(7))
    expect(loaded.chatTemplate.source).toBe(template.source)
    expect(loaded.generationConfig).toEqual(gen)
    expect(loaded.tokenizer.encode("the cat sat")).toEqual(tok.encode("the cat sat"))
    const a = model.readWeights()
    const b = loaded.model.readWeights()
    for (const name of Object.keys(a)) expect(sameBits(a[name]!, b[name]!)).toBe(true)
    // Saving the loaded model again gives the same bytes.
    const again = join(tmp, "roundtrip2")
    await Effect.runPromise(saveModel(again, loaded.model, loaded.tokenizer, { chatTemplate: loaded.chatTemplate, generationConfig: loaded.generationConfig }))
    expect(readFileSync(join(again, "model.safetensors")).equals(readFileSync(join(dir, "model.safetensors")))).toBe(true)
    model.dispose()
    loaded.model.dispose()
  })

  it("corrupt, truncated, inconsistent or missing files fail with a CheckpointError naming the file", async () => {
    const dir = join(tmp, "broken")
    await Effect.runPromise(initModelDir(dir, { tokenizer: tok, config: tinyConfig(tok.vocabSize), seed: 1 }))
    const weights = join(dir, "model.safetensors")
    const good = readFileSync(weights)
    const expectFile = async (file: string, message: RegExp) => {
      const e = await failure(loadModelDir(dir))
      expect(e.file).toBe(join(dir, file))
      expect(e.message).toContain(join(dir, file))
      expect(e.message).toMatch(message)
    }
    writeFileSync(weights, good.subarray(0, good.length - 100))
    await expectFile("model.safetensors", /truncated/)
    const flipped = Buffer.from(good)
    flipped[flipped.length - 10]! ^= 1
    writeFileSync(weights, flipped)
    await expectFile("model.safetensors", /checksum/)
    writeFileSync(weights, good)

    const configFile = join(dir, "config.json")
    const config = readFileSync(configFile, "utf8")
    writeFileSync(configFile, config.slice(0, 40))
    await expectFile("config.json", /invalid JSON/)
    writeFileSync(configFile, config.replace('"hidden_size": 32', '"hidden_size": 64'))
    await expectFile("model.safetensors", /config\.json implies/)
    writeFileSync(configFile, config.replace('"reins_policy_version": 0', '"reins_policy_version": 3'))
    await expectFile("model.safetensors", /policy version 0 but config\.json says 3/)
    writeFileSync(configFile, config.replace('"hidden_act": "silu"', '"hidden_act": "gelu"'))
    await expectFile("config.json", /hidden_act: "gelu" is not supported/)
    // The format reins wrote before its models became Hugging Face ones is refused by name.
    writeFileSync(configFile, JSON.stringify({ model_type: "reins-gpt", vocab_size: 300, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, context_length: 64 }))
    await expectFile("config.json", /model_type "reins-gpt" is a retired format .*rebuild the model with `reins sft`/)
    writeFileSync(configFile, config)

    const tokFile = join(dir, "tokenizer.json")
    const tokText = readFileSync(tokFile, "utf8")
    writeFileSync(tokFile, tokText.slice(0, 100))
    await expectFile("tokenizer.json", /JSON/)
    rmSync(tokFile)
    await expectFile("tokenizer.json", /cannot read/)
    writeFileSync(tokFile, tokText)
    writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: 99999 }))
    await expectFile("generation_config.json", /outside the vocabulary/)
  })

  it("initModelDir is deterministic; ensureModelDir creates once, then loads", async () => {
    const a = join(tmp, "init-a")
    const b = join(tmp, "init-b")
    await Effect.runPromise(initModelDir(a, { tokenizer: tok, seed: 4 }))
    await Effect.runPromise(initModelDir(b, { tokenizer: tok, seed: 4 }))
    expect(readFileSync(join(a, "model.safetensors")).equals(readFileSync(join(b, "model.safetensors")))).toBe(true)
    const c = join(tmp, "ensure")
    expect(existsSync(c)).toBe(false)
    const created = await Effect.runPromise(ensureModelDir(c, { tokenizer: tok, seed: 4 }))
    expect(created.config.contextLength).toBe(1024)
    const before = readFileSync(join(c, "model.safetensors"))
    const loaded = await Effect.runPromise(ensureModelDir(c, { tokenizer: tok, seed: 99 }))
    expect(readFileSync(join(c, "model.safetensors")).equals(before)).toBe(true)
    expect(loaded.config).toEqual(created.config)
  })

  it("optimizer state round-trips and resumes the same updates", async () => {
    const dir = join(tmp, "opt")
    const model = Transformer.init(tinyConfig(tok.vocabSize), 2)
    const opt = new AdamW(model.params, { lr: 1e-2 })
    const grads = new Map([...model.params].map(([n, p]) => [n, p.clone()] as const))
    await opt.apply(grads)
    await Effect.runPromise(saveOptimizerState(dir, await opt.exportState(), 1))
    const state = await Effect.runPromise(loadOptimizerState(dir))
    expect(state!.step).toBe(1)
    const opt2 = new AdamW(model.params, { lr: 1e-2 })
    opt2.importState(state!)
    const s1 = await opt.exportState()
    const s2 = await opt2.exportState()
    for (const k of Object.keys(s1.tensors)) expect(sameBits(s1.tensors[k]!, s2.tensors[k]!)).toBe(true)
    expect(await Effect.runPromise(loadOptimizerState(join(tmp, "nothing-here")))).toBeUndefined()
    for (const g of grads.values()) g.dispose()
    opt.dispose()
    opt2.dispose()
    model.dispose()
  })
})
