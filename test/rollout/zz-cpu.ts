import { Effect } from "effect"
import { HarnessSpec, Task } from "@reins/protocol"
import { makeLocalLauncher } from "@reins/rollout"
import { mkdtempSync, writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
const dir = mkdtempSync("/tmp/rdbg/cpu-")
const l = makeLocalLauncher({ dataDir: dir })
const h = new HarnessSpec({ command: [process.execPath, "-e", ""], timeout_s: 60, grace_s: 1 })
let i = 0
const viaL = () => Effect.runPromise(Effect.scoped(l.launch({ rolloutId: "r", attemptId: `a${++i}`, attemptKey: "k", task: new Task({ id: "t", input: 1 }), harness: h, endpoints: { openaiBaseUrl: "http://x/v1" } }).pipe(Effect.flatMap((x) => x.outcome))))
for (let k = 0; k < 10; k++) await viaL()
const s = new Session(); s.connect()
await s.post("Profiler.enable"); await s.post("Profiler.start")
for (let k = 0; k < 60; k++) await viaL()
const { profile } = await s.post("Profiler.stop")
writeFileSync("/tmp/rdbg/prof/loop.cpuprofile", JSON.stringify(profile))
