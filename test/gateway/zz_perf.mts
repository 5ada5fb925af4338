import { Gateway } from "@reins/gateway"
import { spawn } from "node:child_process"
import { startGateway } from "./harness.js"
const up = spawn(process.execPath, ["/tmp/perf/up.mjs"], { stdio: "inherit" })
await new Promise((r) => setTimeout(r, 500))
const gw = await startGateway(Gateway.upstreamBackend({ url: "http://127.0.0.1:18001/v1" }))
const a = await gw.attempt()
for (const [name, url, key] of [["direct", "http://127.0.0.1:18001", "x"], ["reins", gw.url, a.key], ["direct", "http://127.0.0.1:18001", "x"], ["reins", gw.url, a.key]]) {
  let out = ""
  const load = spawn(process.execPath, ["/tmp/perf/seq.mjs", url, key, "3000"], { stdio: ["ignore", "pipe", "inherit"] })
  load.stdout.on("data", (b) => (out += b))
  await new Promise((r) => load.once("exit", r))
  console.log(name, out.trim())
}
await gw.close(); up.kill()
