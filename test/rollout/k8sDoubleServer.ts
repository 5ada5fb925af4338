/**
 * Runs the Kubernetes API-server double as its own process (for bench/rollout.ts, so the double
 * does not share the launcher's event loop, as a real API server would not). Prints
 * `{"url": "http://127.0.0.1:PORT"}` on its first stdout line; every Job completes at once with
 * a one-line log. Stops on SIGTERM/SIGINT or when stdin closes (the parent went away).
 */
import { K8sDouble } from "./k8sDouble.js"

const double = await K8sDouble.start({ historySize: 2_000 })
double.scriptFor = () => ({ kind: "complete", afterMs: 0, log: "done\n" })
process.stdout.write(JSON.stringify({ url: double.url }) + "\n")
const stop = () => void double.close().then(() => process.exit(0))
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
process.stdin.on("close", stop)
process.stdin.resume()
