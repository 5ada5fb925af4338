import { Gateway } from "@reins/gateway"
import { spawn } from "node:child_process"
import { startGateway } from "./harness.js"
const up = spawn(process.execPath, ["/tmp/perf/up.mjs"], { stdio: "inherit" })
await new Promise((r) => setTimeout(r, 500))
const gw = await startGateway(Gateway.upstreamBackend({ url: "http://127.0.0.1:18001/v1" }))
const a = await gw.attempt()
for (let round = 0; round < 2; round++) {
  const c0 = process.cpuUsage()
  let out = ""
  const load = spawn(process.execPath, ["/tmp/perf/load.mjs", gw.url, a.key, "6"], { stdio: ["ignore", "pipe", "inherit"] })
  load.stdout.on("data", (b) => (out += b))
  await new Promise((r) => load.once("exit", r))
  const c = process.cpuUsage(c0)
  const rps = Number(/rps ([\d.]+)/.exec(out)![1])
  console.log(out.trim(), "gateway CPU µs/request:", ((c.user + c.system) / (rps * 6)).toFixed(0))
}
await gw.close(); up.kill()
