import { Effect, Runtime, Schema, Either, FiberRef, Context } from "effect"
import { Packed } from "@reins/runtime"
const N = 100000
const time = (name: string, f: () => void) => { const c0 = process.cpuUsage(); f(); const c = process.cpuUsage(c0); console.log(name, ((c.user + c.system) / N).toFixed(2), "µs") }
const rt = Runtime.defaultRuntime
time("runFork(void)", () => { for (let i = 0; i < N; i++) Runtime.runFork(rt)(Effect.void) })
await new Promise((r) => setTimeout(r, 100))
const made = Runtime.make({ context: Context.empty(), fiberRefs: rt.fiberRefs, runtimeFlags: rt.runtimeFlags })
time("Runtime.make+runFork", () => { for (let i = 0; i < N; i++) Runtime.runFork(Runtime.make({ context: Context.empty(), fiberRefs: rt.fiberRefs, runtimeFlags: rt.runtimeFlags }))(Effect.void) })
await new Promise((r) => setTimeout(r, 100))
time("runSync(void)", () => { for (let i = 0; i < N; i++) Runtime.runSync(rt)(Effect.void) })
const S = Schema.Struct({ ids: Packed.Int32 })
const enc = Schema.encodeUnknownEither(S), dec = Schema.decodeUnknownEither(S)
const v = { ids: Int32Array.from({ length: 8 }, (_, i) => i) }
time("schema encode", () => { for (let i = 0; i < N; i++) enc(v) })
const e = Either.getOrThrow(enc(v))
time("schema decode", () => { for (let i = 0; i < N; i++) dec(e) })
time("schema make", () => { for (let i = 0; i < N; i++) S.make(v) })
void made
time("schema make novalidate", () => { for (let i = 0; i < N; i++) S.make(v, { disableValidation: true }) })
time("schema make again", () => { for (let i = 0; i < N; i++) S.make(v) })
const S2 = Schema.Struct({ n: Schema.Number })
time("schema make number struct", () => { for (let i = 0; i < N; i++) S2.make({ n: 1 }) })
const validate = Schema.validateEither(S)
time("validateEither", () => { for (let i = 0; i < N; i++) validate(v) })
