// DEV ONLY (not part of the project): canned text, to exercise the gateway's engine path until the policy engine lands.
import { Generator } from "@reins/gateway"
import type { Tokenizer } from "@reins/policy"
import { GenerateChunk, type GenerateRequest, type PauseMode } from "@reins/protocol"
import { Effect, Layer, Stream } from "effect"

export const devGenerator = (tokenizer: Tokenizer, script: (prompt: string) => string, opts: { contextLength?: number } = {}) => {
  let version = 0
  let paused = false
  let draining = false
  let active = 0
  let drained: Array<() => void> = []
  let waiters: Array<() => void> = []
  const state = { version: () => version, setVersion: (v: number) => (version = v) }
  const generate = (req: GenerateRequest) =>
    Stream.suspend(() => {
      const text = script(tokenizer.decode(req.promptIds))
      const all = [...tokenizer.encode(text, { allowSpecial: true }), tokenizer.eosId]
      const ids = all.slice(0, req.params.maxTokens)
      const finish = ids.length === all.length ? "stop" : "length"
      let started = false
      return Stream.fromIterable(ids.map((id, i) => ({ id, last: i === ids.length - 1 }))).pipe(
        Stream.mapEffect(({ id, last }) =>
          Effect.gen(function* () {
            if (!started) {
              while (paused) yield* Effect.async<void>((resume) => void waiters.push(() => resume(Effect.void)))
              started = true
              active++
            }
            while (paused && !draining) yield* Effect.async<void>((resume) => void waiters.push(() => resume(Effect.void)))
            yield* Effect.sleep("1 millis")
            if (last) {
              active--
              if (active === 0) (drained.forEach((f) => f()), (drained = []))
            }
            return new GenerateChunk({ outputIds: Int32Array.of(id), logprobs: Float32Array.of(-0.5), versions: Int32Array.of(version), ...(last ? { finishReason: finish as "stop" | "length" } : {}) })
          })
        )
      )
    })
  const service = {
    info: Effect.sync(() => ({ id: "dev-model", contextLength: opts.contextLength ?? 4096, version, created: 1 })),
    generate,
    pause: (mode: PauseMode) =>
      Effect.suspend(() => {
        paused = true
        draining = mode === "drain"
        if (!draining || active === 0) return Effect.void
        return Effect.async<void>((resume) => void drained.push(() => resume(Effect.void)))
      }),
    resume: Effect.sync(() => {
      paused = false
      draining = false
      const w = waiters
      waiters = []
      w.forEach((f) => f())
    })
  }
  return { layer: Layer.succeed(Generator, service), state }
}
