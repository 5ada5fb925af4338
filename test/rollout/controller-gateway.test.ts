/**
 * The controller against a real Gateway (HTTP on loopback, SQLite store, proxying to the fake
 * OpenAI-compatible upstream of the gateway tests): a harness that only knows the `openai` SDK
 * makes a tool-calling conversation with its attempt key and posts its own reward. Its calls are
 * recorded against the attempt the controller created, and the controller reports the reward
 * the harness posted (no verifier).
 */
import { describe, expect, it } from "@effect/vitest"
import { Gateway } from "@reins/gateway"
import { type AttemptFinished, Task } from "@reins/protocol"
import { ActorSystem } from "@reins/runtime"
import { Effect, Layer, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import { AttemptLedger, launcherActorLayer as launcherLayer, RolloutController } from "@reins/rollout/controller"
import { type FakeUpstream, startFakeUpstream } from "../gateway/fakeUpstream.js"
import { type Running, startGateway } from "../gateway/harness.js"
import { storeLedger } from "reins"
import { baseConfig, controllerFixture, harnessSpec } from "./controllerHelpers.js"
import { tempDir } from "./helpers.js"

let upstream: FakeUpstream
let gateway: Running
const data = tempDir("controller-gw")

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gateway = await startGateway(Gateway.upstreamBackend({ url: upstream.url }))
})
afterAll(async () => {
  await gateway?.close()
  await upstream?.close()
  data.cleanup()
})

const layers = () =>
  RolloutController.layer(
    baseConfig({
      harness: harnessSpec({ command: [process.execPath, controllerFixture("agent.mjs")], verifier: undefined }),
      endpoints: { openaiBaseUrl: `${gateway.url}/v1` }
    })
  ).pipe(
    Layer.provideMerge(
      Layer.merge(launcherLayer({ kind: "local", dataDir: data.dir }), Layer.succeed(AttemptLedger, storeLedger(gateway.store)))
    ),
    Layer.provideMerge(ActorSystem.layerLocal())
  )

describe("rollout controller with a real Gateway", () => {
  it.scopedLive("an openai-SDK harness makes tool calls under its attempt key and posts its own reward", () =>
    Effect.gen(function*() {
      const controller = yield* RolloutController
      const events: Array<AttemptFinished> = []
      yield* Effect.forkScoped(Stream.runForEach(yield* controller.subscribe, (e) => Effect.sync(() => void events.push(e))))
      const task = new Task({ id: "weather", input: { question: "what is the weather in Paris?", reward: 0.75 } })
      const group = yield* controller.submit({ task, size: 2 })
      const ended = yield* controller.awaitGroup(group.groupId)
      expect(ended.map((e) => [e.state, e.reward, e.attempts])).toEqual([["succeeded", 0.75, 1], ["succeeded", 0.75, 1]])
      expect(events.map((e) => [e.rewardSource, e.reward, e.final])).toEqual([["harness", 0.75, true], ["harness", 0.75, true]])

      const store = gateway.store
      for (const id of group.rolloutIds) {
        const detail = yield* store.rollout(id)
        expect(detail.rollout).toMatchObject({ state: "succeeded", group: group.groupId, reward: 0.75, task: { id: "weather" } })
        const [attempt] = detail.attempts
        expect(attempt).toMatchObject({ state: "succeeded", reason: "exit code 0" })
        // both model calls of the conversation were recorded against the controller's attempt
        const calls = yield* store.calls(attempt!.id)
        expect(calls.map((c) => [c.seq, c.status])).toEqual([[1, 200], [2, 200]])
        expect(detail.rewards.map((r) => [r.attemptId, r.value])).toEqual([[attempt!.id, 0.75]])
      }
    }).pipe(Effect.provide(layers())))
})
