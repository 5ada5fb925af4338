/**
 * A Train's rollback point (packages/policy/src/device/rollback.ts), kept on the device and
 * copied to the host: after two more updates (the second with another weight decay, so the
 * optimizer is remade), restoring it puts back every trainable weight and both AdamW moments
 * and the step exactly — whole model and LoRA adapters — and letting it go leaves no tensor
 * behind. Where the device keeps it is decided by `rollbackFitsOnDevice`
 * (backend-memory.test.ts); device-every-backend.test.ts runs it through Train on WebGPU.
 */
import { describe, expect, it } from "@effect/vitest"
import { initAdapters, LoraConfig, packSequences, trainStep, Transformer } from "@reins/policy"
import * as tf from "@tensorflow/tfjs"
import { beforeAll } from "vitest"
import { type RollbackWhere, trainingRollback } from "../../packages/policy/src/device/rollback.js"
import { DeviceOptimizer } from "../../packages/policy/src/device/training.js"
import { backend, tinyConfig } from "./model-fixtures.js"

beforeAll(() => backend())

const config = tinyConfig(96, { nKvHeads: 2, qkNorm: true })
const batches = packSequences(
  Array.from({ length: 3 }, (_, r) => ({ tokens: Int32Array.from({ length: 24 }, (_, i) => (i * 5 + r) % 96), weights: new Float32Array(24).fill(1 / 72) })),
  { maxTokens: 256, maxSeqLen: 64 }
)

/** Every trainable weight and the optimizer's state, read back. */
const state = async (model: Transformer, optimizer: DeviceOptimizer) => ({
  weights: Object.fromEntries(await Promise.all([...model.trainable].map(async ([name, v]) => [name, Array.from((await v.data()) as Float32Array)] as const))),
  optimizer: await optimizer.current!.exportState().then((s) => ({ step: s.step, tensors: Object.fromEntries(Object.entries(s.tensors).map(([k, t]) => [k, Array.from(t)])) }))
})

const update = async (model: Transformer, optimizer: DeviceOptimizer, weightDecay: number) => {
  await trainStep(model, optimizer.configure({ lr: 1e-2, weightDecay, maxGradNorm: 1 }), batches, { kind: "sft" })
}

describe("a Train's rollback point", () => {
  for (const where of ["device", "host"] as const satisfies ReadonlyArray<RollbackWhere>) {
    for (const lora of [false, true]) {
      it(`${where === "device" ? "kept on the device" : "copied to the host"}, ${lora ? "LoRA adapters" : "the whole model"}: restored exactly, nothing left behind`, async () => {
        const model = Transformer.init(config, 1)
        if (lora) {
          const loraConfig = new LoraConfig({ rank: 4, alpha: 8 })
          model.attachLora(loraConfig, initAdapters(config, loraConfig, 2))
        }
        const optimizer = new DeviceOptimizer(model)
        try {
          await update(model, optimizer, 0)
          const tensors = tf.memory().numTensors
          const before = await state(model, optimizer)
          const point = await trainingRollback(model, optimizer, where)
          await update(model, optimizer, 0)
          await update(model, optimizer, 0.1)
          const moved = await state(model, optimizer)
          expect(moved.optimizer.step).toBe(3)
          expect(moved.weights).not.toEqual(before.weights)
          point.restore()
          point.dispose()
          expect(await state(model, optimizer)).toEqual(before)
          expect(tf.memory().numTensors).toBe(tensors)
          // and training goes on from there
          await update(model, optimizer, 0)
          expect((await state(model, optimizer)).optimizer.step).toBe(2)
        } finally {
          optimizer.dispose()
          model.dispose()
        }
      })
    }
  }
})
