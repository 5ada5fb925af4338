import { SqliteStore, Store } from "@reins/gateway"
import { Effect } from "effect"
const prog = Effect.gen(function* () {
  const s = yield* Store
  const { attempt, key } = yield* s.createRollout({ task: 1, start: true })
  const call = { attemptId: attempt.id, endpoint: "chat.completions" as const, model: "m", status: 200, error: null, request: { messages: [{role:"user",content:"hi"}] }, response: { x: 1 }, promptIds: new Int32Array(10), outputIds: new Int32Array(5), logprobs: new Float32Array(5), versions: new Int32Array(5), finishReason: "stop", trainable: true, reuse: { reusedTokens: 0, fromCallId: null, break: null }, timings: { receivedAt: 1, startedAt: 1, firstTokenAt: 1, finishedAt: 1, heldMs: 0 } }
  for (let r = 0; r < 3; r++) {
  let t0 = performance.now()
  for (let i = 0; i < 5000; i++) yield* s.recordCall(call)
  console.log("recordCall", ((performance.now() - t0) / 5000).toFixed(3), "ms")
  t0 = performance.now()
  for (let i = 0; i < 5000; i++) yield* s.attemptByKey(key)
  console.log("attemptByKey", ((performance.now() - t0) / 5000).toFixed(3), "ms")
  }
})
await Effect.runPromise(prog.pipe(Effect.provide(SqliteStore.layer({ filename: "/tmp/p5/db" }))))
